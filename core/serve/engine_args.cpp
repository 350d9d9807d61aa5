#include "serve/engine_args.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>

#include "common/error.h"

namespace halo::serve {
namespace {

VllmArg setting(std::string name, std::string key, bool flag = false) {
  return {std::move(name), ArgKind::kSetting, std::move(key), flag, {}, ""};
}
VllmArg no_effect(std::string name, bool flag, std::vector<std::string> fine, std::string why) {
  return {std::move(name), ArgKind::kNoEffect, "", flag, std::move(fine), std::move(why)};
}
VllmArg refused(std::string name, bool flag, std::vector<std::string> fine, std::string why) {
  return {std::move(name), ArgKind::kRefused, "", flag, std::move(fine), std::move(why)};
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool is_false(const std::string& v) { return v == "false" || v == "0" || v == "no" || v == "off"; }

}  // namespace

// long: a table (one entry per vLLM argument halo knows), clearer as one list
const std::vector<VllmArg>& vllm_args() {
  static const std::vector<VllmArg> args = {
      // What halo does itself, under the same name or halo's.
      setting("model", "model"),
      setting("served_model_name", "served-model-name"),
      setting("tokenizer", "tokenizer"),
      setting("revision", "revision"),
      setting("download_dir", "download-dir"),
      setting("hf_token", "hf-token"),
      setting("compiled_model_dir", "compiled-model-dir"),
      setting("device", "device"),
      setting("dtype", "dtype"),
      setting("kv_cache_dtype", "kv-cache-dtype"),
      setting("quantization", "quantization"),
      setting("max_model_len", "max-model-len"),
      setting("tensor_parallel_size", "tensor-parallel-size"),
      setting("block_size", "block-size"),
      setting("enable_prefix_caching", "enable-prefix-caching", true),
      setting("enable_chunked_prefill", "enable-chunked-prefill", true),
      setting("seed", "seed"),
      setting("gpu_memory_utilization", "device-memory-utilization"),
      setting("kv_cache_memory_bytes", "kv-cache-memory"),
      setting("max_num_batched_tokens", "max-num-batched-tokens"),
      setting("max_num_seqs", "max-num-seqs"),
      setting("enable_auto_tool_choice", "enable-auto-tool-choice", true),
      setting("tool_call_parser", "tool-call-parser"),
      setting("reasoning_parser", "reasoning-parser"),
      setting("task", "task"),
      setting("pooler_config", "pooler-config"),
      setting("enable_lora", "enable-lora", true),
      setting("lora_modules", "lora-modules"),
      setting("max_loras", "max-loras"),
      setting("max_lora_rank", "max-lora-rank"),
      setting("max_cpu_loras", "max-cpu-loras"),
      setting("override_pooler_config", "pooler-config"),
      // Accepted; nothing in halo to change.
      no_effect("trust_remote_code", true, {},
                "halo runs no Python code from model repositories; the architectures it serves are "
                "built in"),
      no_effect("disable_log_requests", true, {}, "halo does not log request contents"),
      no_effect("enable_log_requests", true, {}, "halo does not log request contents"),
      no_effect("disable_log_stats", true, {},
                "halo's periodic stats line is part of its log (--log-level warn hides it)"),
      no_effect("enforce_eager", true, {},
                "only the cuda plugin captures graphs (decode steps, lazily); the other devices "
                "always run eagerly"),
      no_effect("swap_space", false, {},
                "halo preempts by recomputation and keeps no CPU swap space"),
      no_effect("preemption_mode", false, {"recompute"}, "halo preempts by recomputation only"),
      no_effect("distributed_executor_backend", false, {},
                "halo is one process; tensor parallelism is the device plugin's "
                "(--tensor-parallel-size)"),
      no_effect("disable_custom_all_reduce", true, {},
                "collectives are the device plugin's (NCCL on cuda)"),
      no_effect("worker_use_ray", true, {}, "halo is one process without Ray"),
      no_effect("engine_use_ray", true, {}, "halo is one process without Ray"),
      no_effect("max_parallel_loading_workers", false, {},
                "weights are memory-mapped, not loaded by workers"),
      no_effect("tokenizer_pool_size", false, {}, "tokenization runs in the server's own threads"),
      no_effect("use_v2_block_manager", true, {}, "halo has one paged KV block manager"),
      no_effect("disable_frontend_multiprocessing", true, {},
                "the HTTP frontend runs in the engine's process"),
      no_effect("uvicorn_log_level", false, {}, "halo's log level is --log-level"),
      no_effect("disable_fastapi_docs", true, {}, "halo serves no OpenAPI docs pages"),
      no_effect("max_log_len", false, {}, "halo does not log prompts"),
      no_effect("max_seq_len_to_capture", false, {},
                "graph capture is the cuda plugin's own choice"),
      no_effect("max_logprobs", false, {}, "halo's limit on logprobs is fixed (20, as OpenAI's)"),
      no_effect("use_tqdm_on_load", true, {},
                "weights are memory-mapped; there is no load progress"),
      no_effect("disable_async_output_proc", true, {},
                "halo's output processing is always asynchronous"),
      no_effect("code_revision", false, {}, "halo runs no code from model repositories"),
      no_effect("model_impl", false, {"auto"}, "halo has one built-in model definition"),
      no_effect("config_format", false, {"auto", "hf"}, "halo reads Hugging Face config.json"),
      no_effect("load_format", false, {"auto", "safetensors"}, "halo loads safetensors"),
      no_effect("tokenizer_mode", false, {"auto", "hf"},
                "halo reads tokenizer.json with its own tokenizer"),
      no_effect("generation_config", false, {"auto"},
                "halo takes sampling defaults from generation_config.json"),
      no_effect(
          "scheduling_policy", false, {"fcfs", "priority"},
          "halo schedules first come first served, or by a request's priority when it gives one"),
      no_effect("pipeline_parallel_size", false, {"1"},
                "halo has no pipeline parallelism; use --tensor-parallel-size"),
      no_effect("data_parallel_size", false, {"1"},
                "run several halo servers behind a load balancer for data parallelism"),
      no_effect("num_scheduler_steps", false, {"1"}, "halo schedules every step"),
      no_effect("cpu_offload_gb", false, {"0"}, "halo does not offload weights to host memory"),
      no_effect("disable_sliding_window", true, {}, "halo's models attend over the whole context"),
      // Asked for something halo does not do: refused, so nobody believes it is on.
      setting("speculative_config", "speculative-config"),
      refused("speculative_model", false, {}, "use speculative_config (vLLM >= 0.8 spelling)"),
      refused("num_speculative_tokens", false, {}, "use speculative_config (vLLM >= 0.8 spelling)"),
      refused("guided_decoding_backend", false, {"auto"},
              "halo has one guided decoding backend (regex DFA and GBNF grammars): 'auto' is it"),
      refused("ssl_keyfile", false, {},
              "halo serves plain HTTP; terminate TLS in a proxy in front of it"),
      refused("ssl_certfile", false, {},
              "halo serves plain HTTP; terminate TLS in a proxy in front of it"),
      refused("ssl_ca_certs", false, {},
              "halo serves plain HTTP; terminate TLS in a proxy in front of it"),
      refused("allowed_origins", false, {},
              "halo sends no CORS headers; serve browser clients through a proxy"),
      refused("root_path", false, {}, "halo serves at the root; strip a path prefix in a proxy"),
      refused("rope_scaling", false, {}, "halo takes rope_scaling from config.json only"),
      refused("rope_theta", false, {}, "halo takes rope_theta from config.json only"),
      refused("hf_overrides", false, {},
              "halo takes the model's configuration from config.json only"),
      refused("skip_tokenizer_init", true, {},
              "halo needs the tokenizer (prompts as token ids work with it loaded)"),
      refused("num_gpu_blocks_override", false, {},
              "use --max-kv-tokens (blocks x block size) to size the KV cache"),
      refused("tokenizer_revision", false, {},
              "a separate tokenizer revision is not supported; give --tokenizer a directory"),
  };
  return args;
}

const VllmArg* find_vllm_arg(const std::string& name) {
  std::string n = name;
  while (!n.empty() && n.front() == '-') n.erase(n.begin());
  std::replace(n.begin(), n.end(), '-', '_');
  for (const auto& a : vllm_args())
    if (a.name == n) return &a;
  return nullptr;
}

std::string vllm_arg_key(const VllmArg& arg, const std::string& value, const std::string& source) {
  if (arg.kind == ArgKind::kSetting) return arg.halo_key;
  const std::string v = lower(value);
  const bool asks_nothing =
      (arg.flag && is_false(v)) || std::find(arg.fine.begin(), arg.fine.end(), v) != arg.fine.end();
  if (arg.kind == ArgKind::kRefused && !asks_nothing)
    throw Error(fmt::format("{}: {}={}: not supported: {}", source, arg.name, value, arg.why));
  if (arg.kind == ArgKind::kNoEffect && !arg.fine.empty() && !asks_nothing)
    throw Error(fmt::format("{}: {}={}: not supported (accepted: {}): {}", source, arg.name, value,
                            fmt::join(arg.fine, ", "), arg.why));
  if (!asks_nothing || arg.kind == ArgKind::kNoEffect)
    spdlog::info("{}: {} has no effect in halo: {}", source, arg.name, arg.why);
  return "";
}

}  // namespace halo::serve
