#include "serve/serving_config.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/error.h"
#include "engine/spec_decode/speculative_config.h"
#include "model/quantize.h"
#include "serve/engine_args.h"
#include "serve/pooling_config.h"
#include "serve/reasoning_parser.h"
#include "serve/tool_parsers.h"

extern char** environ;

namespace halo::serve {
namespace fs = std::filesystem;
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

[[noreturn]] void bad(const Setting& s, const std::string& why) {
  throw Error(fmt::format("{}: {}={}: {}", s.source, s.key, s.value, why));
}

int64_t to_int(const Setting& s, int64_t lo, int64_t hi) {
  int64_t v = 0;
  const std::string t = trim(s.value);
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || p != t.data() + t.size() || t.empty()) bad(s, "expected an integer");
  if (v < lo || v > hi) bad(s, hi == std::numeric_limits<int32_t>::max() ? fmt::format("must be at least {}", lo)
                                                                          : fmt::format("must be in [{}, {}]", lo, hi));
  return v;
}

bool to_bool(const Setting& s) {
  std::string v = lower(trim(s.value));
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  bad(s, "expected true or false");
}

constexpr int64_t kInt = std::numeric_limits<int32_t>::max();

}  // namespace

std::string canonical_dtype(const std::string& d) {
  std::string x = lower(trim(d));
  if (x == "half" || x == "float16" || x == "fp16") return "float16";
  if (x == "bfloat16" || x == "bf16") return "bfloat16";
  if (x == "float" || x == "float32" || x == "fp32") return "float32";
  return x;
}

uint64_t parse_bytes(const std::string& text) {
  std::string t = trim(text);
  size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) ++i;
  if (i == 0) throw Error("expected a number of bytes, e.g. 4294967296 or 4GiB");
  double v = 0;
  try {
    v = std::stod(t.substr(0, i));
  } catch (const std::exception&) {
    throw Error("expected a number of bytes, e.g. 4294967296 or 4GiB");
  }
  std::string unit = lower(trim(t.substr(i)));
  double mul = 1;
  if (unit.empty() || unit == "b") mul = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") mul = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib") mul = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib") mul = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tb" || unit == "tib") mul = 1024.0 * 1024 * 1024 * 1024;
  else throw Error(fmt::format("unknown unit '{}' (use K, M, G or T)", unit));
  double bytes = v * mul;
  if (!std::isfinite(bytes) || bytes >= 1.8e19) throw Error("too large");
  return static_cast<uint64_t>(bytes);
}

const std::vector<std::string>& setting_keys() {
  static const std::vector<std::string> keys = {"model",
                                                "served-model-name",
                                                "tokenizer",
                                                "revision",
                                                "download-dir",
                                                "hf-token",
                                                "compiled-model-dir",
                                                "device",
                                                "device-index",
                                                "dtype",
                                                "tensor-parallel-size",
                                                "max-num-seqs",
                                                "max-model-len",
                                                "max-num-batched-tokens",
                                                "block-size",
                                                "kv-cache-memory",
                                                "device-memory-utilization",
                                                "max-kv-tokens",
                                                "enable-chunked-prefill",
                                                "enable-prefix-caching",
                                                "seed",
                                                "threads",
                                                "kv-cache-dtype",
                                                "quantization",
                                                "quantization-group-size",
                                                "speculative-config",
                                                "rolling-batch",
                                                "enable-auto-tool-choice",
                                                "tool-call-parser",
                                                "reasoning-parser",
                                                "task",
                                                "pooler-config",
                                                "enable-lora",
                                                "lora-modules",
                                                "max-loras",
                                                "max-lora-rank",
                                                "max-cpu-loras"};
  return keys;
}

std::vector<LoraModule> parse_lora_modules(const std::string& v) {
  std::vector<LoraModule> out;
  auto add = [&](std::string name, std::string path) {
    if (name.empty() || path.empty())
      throw Error(fmt::format("a LoRA module needs a name and a path (name=path), got '{}={}'",
                              name, path));
    for (const auto& m : out)
      if (m.name == name) throw Error(fmt::format("LoRA module '{}' is given twice", name));
    out.push_back({std::move(name), std::move(path)});
  };
  const std::string t = trim(v);
  if (t.starts_with("{") || t.starts_with("[")) {  // vLLM's JSON form
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(t);
    } catch (const nlohmann::json::exception& e) {
      throw Error(fmt::format("LoRA modules JSON: {}", e.what()));
    }
    if (j.is_object()) j = nlohmann::json::array({j});
    for (const auto& m : j) {
      if (!m.is_object() || !m.contains("name") || !m.contains("path") || !m["name"].is_string() ||
          !m["path"].is_string())
        throw Error(fmt::format("a LoRA module must be {{\"name\": ..., \"path\": ...}}, got {}",
                                m.dump()));
      add(m["name"].get<std::string>(), m["path"].get<std::string>());
    }
    return out;
  }
  std::string spaced = t;  // name=path, separated by spaces or commas
  std::replace(spaced.begin(), spaced.end(), ',', ' ');
  std::istringstream in(spaced);
  for (std::string item; in >> item;) {
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      throw Error(fmt::format("LoRA module '{}' is not name=path", item));
    add(item.substr(0, eq), item.substr(eq + 1));
  }
  return out;
}

namespace {

// LoRA adapters (vLLM's flags); false for any other key.
bool apply_lora_setting(ModelSettings& m, const std::string& key, const std::string& v,
                        const Setting& s) {
  auto& e = m.engine;
  if (key == "enable-lora") {
    e.enable_lora = to_bool(s);
  } else if (key == "lora-modules") {
    try {
      m.lora_modules = parse_lora_modules(v);
    } catch (const Error& err) {
      bad(s, err.what());
    }
  } else if (key == "max-loras") {
    e.max_loras = static_cast<int>(to_int(s, 1, 4096));
  } else if (key == "max-lora-rank") {
    e.max_lora_rank = static_cast<int>(to_int(s, 1, 65536));
  } else if (key == "max-cpu-loras") {
    e.max_cpu_loras = static_cast<int>(to_int(s, 0, 1 << 20));
  } else {
    return false;
  }
  return true;
}

// The settings of how chat output is read (vLLM's tool and reasoning parser
// flags); false for any other key.
bool apply_chat_output_setting(ModelSettings& m, const std::string& key, const std::string& v,
                               const Setting& s) {
  if (key == "enable-auto-tool-choice") {
    m.enable_auto_tool_choice = to_bool(s);
  } else if (key == "tool-call-parser") {
    const auto& names = ToolCallParser::names();
    if (std::find(names.begin(), names.end(), lower(v)) == names.end())
      bad(s, fmt::format("expected one of {}", fmt::join(names, ", ")));
    m.tool_call_parser = lower(v);
  } else if (key == "task") {
    // vLLM's names, and LMI's option.task for the same two.
    const std::string t = lower(v);
    if (t == "auto" || t == "generate" || t == "text-generation" || t == "text_generation")
      m.task = "generate";
    else if (t == "embed" || t == "embedding" || t == "text_embedding" || t == "text-embedding")
      m.task = "embed";
    else
      bad(s, "expected generate (or auto) or embed");
  } else if (key == "pooler-config") {
    try {
      parse_pooler_config(v);
    } catch (const Error& err) {
      bad(s, err.what());
    }
    m.pooler_config = v;
  } else if (key == "reasoning-parser") {
    if (!ReasoningParser::known(lower(v))) bad(s, "expected deepseek_r1 or qwen3");
    m.reasoning_parser = lower(v);
  } else {
    return false;
  }
  return true;
}

// --speculative-config checked and in canonical form; empty: off.
std::string speculative_config_json(const Setting& s, const std::string& v) {
  try {
    return v.empty() ? "" : engine::spec::parse_speculative_config(v).to_json();
  } catch (const Error& err) {
    bad(s, err.what());
  }
  return "";
}

}  // namespace

void apply_setting(ModelSettings& m, const Setting& s) {
  std::string key = s.key == "gpu-memory-utilization" ? "device-memory-utilization" : s.key;
  auto& e = m.engine;
  const std::string v = trim(s.value);
  if (key == "model") {
    if (v.empty()) bad(s, "expected a model directory or a Hugging Face model id");
    m.dir = v;
  } else if (key == "tokenizer") {
    m.tokenizer = v;
  } else if (key == "revision") {
    m.hub.revision = v;
  } else if (key == "download-dir") {
    m.hub.cache_dir = v;
  } else if (key == "hf-token") {
    m.hub.token = v;
  } else if (key == "served-model-name") {
    if (v.empty()) bad(s, "expected a name");
    m.name = v;
  } else if (key == "compiled-model-dir") {
    m.compiled_model_dir = v;
  } else if (key == "device") {
    if (v.empty()) bad(s, "expected a device plugin name (cpu, rbln, cuda) or a plugin .so path");
    e.device = v;
  } else if (key == "device-index") {
    e.device_index = static_cast<int>(to_int(s, 0, kInt));
  } else if (key == "dtype") {
    std::string d = canonical_dtype(v);
    if (d != "auto" && d != "float16" && d != "bfloat16" && d != "float32")
      bad(s, "expected auto, float16 (fp16, half), bfloat16 (bf16) or float32 (fp32, float)");
    m.dtype = d;
  } else if (key == "tensor-parallel-size") {
    m.tensor_parallel_size = lower(v) == "max" ? 0 : static_cast<int>(to_int(s, 1, 1024));
  } else if (key == "max-num-seqs") {
    e.max_num_seqs = static_cast<int>(to_int(s, 0, kInt));  // 0: the device's choice
  } else if (key == "max-model-len") {
    e.max_model_len = static_cast<int>(to_int(s, 0, kInt));  // 0: the device's choice
  } else if (key == "max-num-batched-tokens") {
    e.max_num_batched_tokens = static_cast<int>(to_int(s, 0, kInt));  // 0: the device's choice
  } else if (key == "block-size") {
    e.block_size = static_cast<int>(to_int(s, 0, kInt));  // 0: the device's choice
  } else if (key == "kv-cache-memory") {
    try {
      e.kv_cache_memory = parse_bytes(v);
    } catch (const Error& x) {
      bad(s, x.what());
    }
  } else if (key == "device-memory-utilization") {
    double d = 0;
    try {
      size_t used = 0;
      d = std::stod(v, &used);
      if (used != v.size()) throw Error("trailing characters");
    } catch (const std::exception&) {
      bad(s, "expected a fraction in (0, 1]");
    }
    if (!(d > 0 && d <= 1)) bad(s, "expected a fraction in (0, 1]");
    e.device_memory_utilization = static_cast<float>(d);
  } else if (key == "max-kv-tokens") {
    e.max_kv_tokens = to_int(s, 0, std::numeric_limits<int64_t>::max());
  } else if (key == "enable-chunked-prefill") {
    e.enable_chunked_prefill = to_bool(s);
  } else if (key == "enable-prefix-caching") {
    e.enable_prefix_caching = to_bool(s);
  } else if (key == "seed") {
    e.seed = static_cast<uint64_t>(to_int(s, 0, std::numeric_limits<int64_t>::max()));
  } else if (key == "threads") {
    e.threads = static_cast<int>(to_int(s, 0, 4096));
  } else if (key == "kv-cache-dtype") {
    try {
      engine::parse_kv_cache_dtype(v);
    } catch (const Error&) {
      bad(s, "expected auto, fp32 (float32), bf16 (bfloat16) or fp16 (float16, half)");
    }
    e.kv_cache_dtype = v;
  } else if (key == "quantization") {
    const std::string q = lower(v);
    if (!model::is_quantization_method(q))
      bad(s, fmt::format("expected one of {} (quantization at load; pre-quantized GGUF, GPTQ and "
                         "compressed-tensors checkpoints are recognized from their files)",
                         model::quantization_methods()));
    e.quantization = q;
  } else if (key == "quantization-group-size") {
    e.quantization_group_size = static_cast<int>(to_int(s, 0, 1 << 20));
  } else if (key == "speculative-config") {
    e.speculative_config = speculative_config_json(s, v);
  } else if (key == "rolling-batch") {
    std::string r = lower(v);
    if (r == "disable")
      bad(s, "halo always batches continuously (rolling batch); use auto, vllm or lmi-dist");
    if (r != "auto" && r != "vllm" && r != "lmi-dist" && r != "trtllm" && r != "scheduler")
      bad(s, "expected auto, vllm, lmi-dist, trtllm or scheduler (all run halo's continuous batching)");
    m.rolling_batch = r;
  } else if (!apply_chat_output_setting(m, key, v, s) && !apply_lora_setting(m, key, v, s)) {
    throw Error(fmt::format("{}: unknown setting '{}' (known: {})", s.source, s.key, fmt::join(setting_keys(), ", ")));
  }
  m.origin[key] = s.source;
}

void apply_layer(ModelSettings& s, const SettingLayer& layer) {
  for (const auto& x : layer) apply_setting(s, x);
}

std::string lmi_option_key(const std::string& option, const std::string& value, const std::string& source) {
  static const std::map<std::string, std::string> lmi = {
      {"model_id", "model"},
      {"tensor_parallel_degree", "tensor-parallel-size"},
      {"rolling_batch", "rolling-batch"},
      {"max_rolling_batch_size", "max-num-seqs"},
      {"max_rolling_batch_prefill_tokens", "max-num-batched-tokens"},
  };
  // LMI's own options with nothing to do in halo (vLLM's are in engine_args).
  static const std::set<std::string> ignored = {
      "entrypoint",       "enable_streaming", "model_loading_timeout", "predict_timeout",
      "output_formatter", "async_mode",       "max_input_len",         "max_output_len",
      "device_map",       "mpi_mode"};
  std::string o = lower(option);
  if (auto it = lmi.find(o); it != lmi.end()) return it->second;
  if (ignored.count(o)) {
    spdlog::info("{}: option.{} has no effect in halo", source, o);
    return "";
  }
  if (const VllmArg* arg = find_vllm_arg(o); arg && o != "model") return vllm_arg_key(*arg, value, source);
  std::string key = o;
  std::replace(key.begin(), key.end(), '_', '-');
  const auto& keys = setting_keys();
  if (key != "model" && std::find(keys.begin(), keys.end(), key) != keys.end()) return key;
  throw Error(fmt::format("{}: unknown option '{}' (LMI options halo reads: model_id, tensor_parallel_degree, "
                          "rolling_batch, max_rolling_batch_size, max_rolling_batch_prefill_tokens, vLLM's engine "
                          "arguments (docs/serving.md), or any halo setting: {})",
                          source, o, fmt::join(keys, ", ")));
}

std::map<std::string, std::string> process_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

SettingLayer sagemaker_env_layer(const std::map<std::string, std::string>& env) {
  SettingLayer layer;
  // A directory or a Hub id: resolved (from the cache, else downloaded) when loaded.
  if (auto it = env.find("HF_MODEL_ID"); it != env.end() && !it->second.empty())
    layer.push_back({"model", it->second, "environment HF_MODEL_ID"});
  if (auto it = env.find("HF_MODEL_REVISION"); it != env.end() && !it->second.empty())
    layer.push_back({"revision", it->second, "environment HF_MODEL_REVISION"});
  if (auto it = env.find("TENSOR_PARALLEL_DEGREE"); it != env.end() && !it->second.empty())
    layer.push_back({"tensor-parallel-size", it->second, "environment TENSOR_PARALLEL_DEGREE"});
  for (const auto& [name, value] : env) {
    if (!name.starts_with("OPTION_") || value.empty()) continue;  // set but empty: not set
    std::string source = "environment " + name;
    std::string key = lmi_option_key(name.substr(7), value, source);
    if (!key.empty()) layer.push_back({key, value, source});
  }
  return layer;
}

SettingLayer serving_properties_layer(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw Error(fmt::format("{}: cannot open the file", file.string()));
  static const std::set<std::string> djl_keys = {"engine", "job_queue_size", "batch_size", "max_batch_delay",
                                                 "max_idle_time", "minworkers", "maxworkers", "load_on_devices",
                                                 "required_memory_mb", "reserved_memory_mb", "gpu.minworkers",
                                                 "gpu.maxworkers", "cpu.minworkers", "cpu.maxworkers"};
  SettingLayer layer;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    std::string t = trim(line);
    if (t.empty() || t[0] == '#' || t[0] == '!') continue;
    std::string source = fmt::format("{}:{}", file.string(), n);
    size_t eq = t.find_first_of("=:");
    if (eq == std::string::npos) throw Error(fmt::format("{}: expected key=value, got '{}'", source, t));
    std::string key = trim(t.substr(0, eq)), value = trim(t.substr(eq + 1));
    std::string lk = lower(key);
    if (lk.starts_with("option.")) {
      std::string k = lmi_option_key(lk.substr(7), value, source);
      if (k.empty()) continue;
      // A relative path is relative to this file; "org/name" not found there is a Hub id.
      const bool hub_id = value.find('/') != std::string::npos && model::looks_like_hub_id(value) &&
                          !fs::exists(file.parent_path() / value);
      if (k == "model" && !value.empty() && fs::path(value).is_relative() && value.find("://") == std::string::npos &&
          !hub_id)
        value = (file.parent_path() / value).lexically_normal().string();
      layer.push_back({k, value, source});
    } else if (djl_keys.count(lk)) {
      spdlog::info("{}: {} has no effect in halo", source, key);
    } else {
      throw Error(fmt::format("{}: unknown key '{}' (halo reads option.* keys; engine, batch_size, job_queue_size "
                              "and the worker keys are accepted and ignored)", source, key));
    }
  }
  return layer;
}

std::string describe(const ModelSettings& s) {
  const auto& e = s.engine;
  std::string out;
  auto row = [&](const std::string& key, const std::string& value) {
    auto it = s.origin.find(key);
    out += fmt::format("  {} = {}  ({})\n", key, value, it == s.origin.end() ? "default" : it->second);
  };
  auto or_device = [](int64_t v) { return v == 0 ? std::string("device's choice") : std::to_string(v); };
  row("model", s.dir.string());
  if (!s.tokenizer.empty()) row("tokenizer", s.tokenizer);
  if (!s.hub.revision.empty()) row("revision", s.hub.revision);
  if (!s.hub.cache_dir.empty()) row("download-dir", s.hub.cache_dir.string());
  if (!s.hub.token.empty()) row("hf-token", "(set)");
  if (!s.compiled_model_dir.empty()) row("compiled-model-dir", s.compiled_model_dir.string());
  row("served-model-name", s.name);
  row("device", e.device);
  row("device-index", std::to_string(e.device_index));
  row("dtype", s.dtype);
  row("tensor-parallel-size", s.tensor_parallel_size == 0 ? "max" : std::to_string(s.tensor_parallel_size));
  row("max-num-seqs", or_device(e.max_num_seqs));
  row("max-model-len", or_device(e.max_model_len));
  row("max-num-batched-tokens", or_device(e.max_num_batched_tokens));
  row("block-size", or_device(e.block_size));
  row("kv-cache-memory", e.kv_cache_memory ? std::to_string(e.kv_cache_memory) : "from the fraction");
  row("device-memory-utilization", fmt::format("{}", e.device_memory_utilization));
  row("max-kv-tokens", e.max_kv_tokens ? std::to_string(e.max_kv_tokens) : "not set");
  row("enable-chunked-prefill", e.enable_chunked_prefill ? "true" : "false");
  row("enable-prefix-caching", e.enable_prefix_caching ? "true" : "false");
  row("seed", std::to_string(e.seed));
  row("threads", std::to_string(e.threads));
  row("kv-cache-dtype", e.kv_cache_dtype);
  row("quantization", e.quantization);
  row("quantization-group-size",
      e.quantization_group_size ? std::to_string(e.quantization_group_size) : "default");
  row("speculative-config", e.speculative_config.empty() ? "off" : e.speculative_config);
  row("rolling-batch", s.rolling_batch);
  row("enable-auto-tool-choice", s.enable_auto_tool_choice ? "true" : "false");
  row("tool-call-parser", s.tool_call_parser.empty() ? "from the chat template" : s.tool_call_parser);
  row("reasoning-parser", s.reasoning_parser.empty() ? "none" : s.reasoning_parser);
  row("enable-lora", e.enable_lora ? "true" : "false");
  if (e.enable_lora) {
    row("max-loras", std::to_string(e.max_loras));
    row("max-lora-rank", std::to_string(e.max_lora_rank));
    row("max-cpu-loras", e.max_cpu_loras ? std::to_string(e.max_cpu_loras) : "every adapter");
    std::string mods;
    for (const auto& l : s.lora_modules) mods += (mods.empty() ? "" : " ") + l.name + "=" + l.path;
    row("lora-modules", mods.empty() ? "none" : mods);
  }
  row("task", s.task);
  if (s.task == "embed")
    row("pooler-config", s.pooler_config.empty() ? "the model's own" : s.pooler_config);
  return out;
}

}  // namespace halo::serve
