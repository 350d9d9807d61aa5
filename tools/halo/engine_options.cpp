#include <boost/dll/runtime_symbol_info.hpp>

#include "cli.h"
#include "commands.h"
#include "engine/spec_decode/speculative_config.h"

namespace halo::tools {
namespace fs = std::filesystem;

namespace {
fs::path& default_model_override() {
  static fs::path dir;
  return dir;
}
}  // namespace

void set_default_model_dir(const fs::path& dir) { default_model_override() = dir; }

fs::path default_model_dir() {
  if (!default_model_override().empty()) return default_model_override();
  boost::system::error_code ec;
  auto exe = boost::dll::program_location(ec);
  if (!ec) {
    fs::path installed = fs::path(exe.parent_path().string()) / ".." / "share" / "halo" / "models" / "pkgchat-5m";
    if (fs::exists(installed / "config.json")) return installed.lexically_normal();
  }
  return fs::path(HALO_SOURCE_MODEL_DIR);
}

void add_engine_options(CLI::App& cmd, engine::EngineConfig& c) {
  cmd.add_option("--device", c.device, "Device plugin: a name (cpu, rbln, cuda) or a plugin .so path")
      ->capture_default_str();
  cmd.add_option("--device-index", c.device_index, "Which device of the plugin")->capture_default_str();
  // 0 = the device's choice; an explicit value the device cannot honour is an error.
  cmd.add_option("--max-num-seqs", c.max_num_seqs, "Most sequences in one step (default: device's; CPU 256)");
  cmd.add_option("--max-model-len", c.max_model_len,
                 "Most tokens per sequence, prompt plus output (default: device's; CPU: the model's "
                 "max_position_embeddings)");
  cmd.add_option("--max-num-batched-tokens", c.max_num_batched_tokens,
                 "Most tokens in one step (default: device's; CPU max(2048, max-model-len))");
  cmd.add_option("--block-size", c.block_size, "Tokens per KV block (default: device's; CPU 16)");
  cmd.add_option("--kv-cache-memory", c.kv_cache_memory, "Bytes for the KV cache (wins over the fraction)");
  cmd.add_option("--device-memory-utilization,--gpu-memory-utilization", c.device_memory_utilization,
                 "Fraction of the device memory left after weights to give the KV cache")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd.add_option("--max-kv-tokens", c.max_kv_tokens, "Size the KV cache in tokens instead of bytes");
  cmd.add_flag("--enable-chunked-prefill,!--no-enable-chunked-prefill", c.enable_chunked_prefill,
               "Split long prompts across steps, mixed with decodes (on by default; "
               "--no-enable-chunked-prefill turns it off)")
      ->capture_default_str();
  cmd.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", c.enable_prefix_caching,
               "Reuse the KV blocks of shared prompt prefixes (hash chain of full blocks, LRU eviction; off by "
               "default)")
      ->capture_default_str();
  cmd.add_option("--seed", c.seed, "Seed of the engine's random generator")->capture_default_str();
  cmd.add_option("--threads", c.threads, "Host threads for the CPU plugin (0: all cores)");
  cmd.add_option("--kv-cache-dtype", c.kv_cache_dtype,
                 "KV cache element type: auto (bf16 for 16-bit checkpoints on cpu), bf16, fp16 or fp32")
      ->capture_default_str();
  cmd.add_option("--quantization,-q", c.quantization,
                 "Quantize the weights at load: none, int8 (per output channel) or int4 (groups of "
                 "--quantization-group-size inputs, default 32); pre-quantized files (GGUF) load "
                 "as they are")
      ->capture_default_str();
  cmd.add_option("--quantization-group-size", c.quantization_group_size,
                 "Inputs sharing one scale for --quantization int4 (a multiple of 16; 0: 32)");
  cmd.add_option("--speculative-config", c.speculative_config,
                 "Speculative decoding as vLLM's JSON, e.g. '{\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
                 "\"prompt_lookup_max\": 4}' (docs/speculative.md)")
      ->check([](const std::string& v) {
        try {
          if (!v.empty()) engine::spec::parse_speculative_config(v);
          return std::string();
        } catch (const std::exception& e) {
          std::string m = e.what();  // CLI11 names the flag itself
          const std::string flag = "--speculative-config: ";
          return m.rfind(flag, 0) == 0 ? m.substr(flag.size()) : m;
        }
      });
}

void add_lora_options(CLI::App& cmd, engine::EngineConfig& c) {
  cmd.add_flag("--enable-lora", c.enable_lora,
               "Serve LoRA adapters over the base model (docs/lora.md)");
  cmd.add_option("--max-loras", c.max_loras, "LoRA adapters one step may run (device slots)")
      ->capture_default_str();
  cmd.add_option("--max-lora-rank", c.max_lora_rank, "Largest LoRA rank accepted")
      ->capture_default_str();
  cmd.add_option("--max-cpu-loras", c.max_cpu_loras,
                 "LoRA adapters kept in host memory, least recently used dropped (0: all)");
}

}  // namespace halo::tools
