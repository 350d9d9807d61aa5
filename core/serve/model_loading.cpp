#include "serve/model_loading.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "device/plugin.h"
#include "engine/llm_engine.h"
#include "engine/spec_decode/speculative_config.h"
#include "model/gguf_model.h"
#include "model/hf_hub.h"
#include "model/model_loader.h"
#include "serve/pooling_config.h"
#include "serve/tokenizer_files.h"
#include "serve/tool_parsers.h"
#include "text/tokenizer/tokenizer.h"

namespace halo::serve {
namespace fs = std::filesystem;

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = double(b);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.1f} {}", v, units[u]);
}

uint64_t kv_element_bytes(const model::ModelConfig& c, uint32_t device_kv_dtypes,
                          const std::string& kv_cache_dtype) {
  const int32_t asked = engine::parse_kv_cache_dtype(kv_cache_dtype);
  if (asked != HALO_KV_DTYPE_AUTO) return asked == HALO_KV_DTYPE_FP32 ? 4 : 2;
  const uint32_t bits16 = HALO_DTYPE_BIT(HALO_KV_DTYPE_BF16) | HALO_DTYPE_BIT(HALO_KV_DTYPE_FP16);
  const std::string stored = c.torch_dtype.empty() ? "float32" : canonical_dtype(c.torch_dtype);
  const bool checkpoint16 = stored == "bfloat16" || stored == "float16";
  if (device_kv_dtypes == 0 || (checkpoint16 && (device_kv_dtypes & bits16))) return 2;
  return (device_kv_dtypes & HALO_DTYPE_BIT(HALO_KV_DTYPE_FP32)) ? 4 : 2;
}

uint64_t kv_bytes_per_token(const model::ModelConfig& c, uint64_t elem) {
  return 2ull * uint64_t(std::max(0, c.spec.num_layers)) *
         uint64_t(std::max(0, c.spec.num_kv_heads)) * uint64_t(std::max(0, c.spec.head_dim)) * elem;
}

uint64_t weight_file_bytes(const fs::path& dir) {
  uint64_t total = 0;
  std::error_code ec;
  if (fs::is_regular_file(dir, ec)) return fs::file_size(dir, ec);  // a .gguf file
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && (e.path().extension() == ".safetensors" || e.path().extension() == ".gguf"))
      total += e.file_size();
  return total;
}

DraftFootprint draft_footprint(const ModelSettings& s, uint32_t device_kv_dtypes) {
  if (s.engine.speculative_config.empty()) return {};
  const auto sc = engine::spec::parse_speculative_config(s.engine.speculative_config);
  if (sc.method != engine::spec::SpeculativeConfig::Method::kDraftModel) return {};
  fs::path dir;
  try {  // what the engine will load, if it is here already (a Hub id not yet downloaded is not)
    model::HubOptions hub;
    hub.revision = sc.revision;
    hub.offline = true;
    hub.progress = false;
    dir = model::resolve_model(sc.model, hub);
  } catch (const Error&) {
    return {};
  }
  const auto c = model::load_config(dir);
  return {weight_file_bytes(dir),
          kv_bytes_per_token(c, kv_element_bytes(c, device_kv_dtypes, s.engine.kv_cache_dtype))};
}

MemoryEstimate estimate_memory(const ModelSettings& s, const model::ModelConfig& c,
                               uint64_t weights, uint64_t left, uint32_t device_kv_dtypes) {
  MemoryEstimate m;
  // A draft model's weights, and its KV beside the target's in every block.
  const DraftFootprint draft = draft_footprint(s, device_kv_dtypes);
  m.weights = weights + draft.weights;
  m.kv_bytes_per_token =
      kv_bytes_per_token(c, kv_element_bytes(c, device_kv_dtypes, s.engine.kv_cache_dtype)) +
      draft.kv_bytes_per_token;
  const auto& e = s.engine;
  auto from = [&](const char* key) {
    auto it = s.origin.find(key);
    return fmt::format("{} from {}", key, it == s.origin.end() ? "default" : it->second);
  };
  if (e.max_kv_tokens > 0) {
    m.kv = uint64_t(e.max_kv_tokens) * m.kv_bytes_per_token;
    m.kv_source = fmt::format("max-kv-tokens={} x {} B/token, {}", e.max_kv_tokens,
                              m.kv_bytes_per_token, from("max-kv-tokens"));
  } else if (e.kv_cache_memory > 0) {
    m.kv = e.kv_cache_memory;
    m.kv_source = from("kv-cache-memory");
  } else {
    // The fraction of what is left after the weights, capped at every
    // sequence at full length (the engine's own cap).
    double budget = left > m.weights ? double(left - m.weights) * e.device_memory_utilization : 0.0;
    uint64_t seqs = e.max_num_seqs > 0 ? uint64_t(e.max_num_seqs) : 256;
    uint64_t len = e.max_model_len > 0 ? uint64_t(e.max_model_len)
                                       : uint64_t(std::max(1, c.max_position_embeddings));
    double useful = double(seqs * len * m.kv_bytes_per_token);
    m.kv = static_cast<uint64_t>(std::min(budget, useful));
    m.kv_source =
        fmt::format("device-memory-utilization={} of what is left, capped at {} seqs x {} tokens",
                    e.device_memory_utilization, seqs, len);
  }
  return m;
}

uint64_t MemoryPlan::left(const std::string& device, uint64_t free_bytes) const {
  auto it = claimed_.find(device);
  uint64_t used = it == claimed_.end() ? 0 : it->second.bytes;
  return free_bytes > used ? free_bytes - used : 0;
}

std::string MemoryPlan::claim(const std::string& model, const std::string& device,
                              uint64_t free_bytes, const MemoryEstimate& need) {
  const uint64_t have = left(device, free_bytes);
  if (need.total() > have) {
    const auto& c = claimed_[device];
    std::string others = c.models.empty()
                             ? "no model loaded before it"
                             : fmt::format("models loaded before it: {} claim {}",
                                           fmt::join(c.models, ", "), human_bytes(c.bytes));
    return fmt::format(
        "model '{}' does not fit on {}: weights {} + KV cache {} ({}) = {} needed, but only {} of "
        "the device's {} "
        "free is left ({}). Give it a smaller kv-cache-memory / max-kv-tokens, or serve it on "
        "another device",
        model, device, human_bytes(need.weights), human_bytes(need.kv), need.kv_source,
        human_bytes(need.total()), human_bytes(have), human_bytes(free_bytes), others);
  }
  auto& c = claimed_[device];
  c.bytes += need.total();
  c.models.push_back(model);
  return {};
}

std::string check_dtype(const std::string& requested, const model::ModelConfig& cfg,
                        const device::DeviceInfo& device, const std::string& plugin) {
  std::string want = canonical_dtype(requested);
  if (want == "auto") return {};
  static const std::pair<const char*, int32_t> kCompute[] = {{"float32", HALO_COMPUTE_DTYPE_FP32},
                                                             {"bfloat16", HALO_COMPUTE_DTYPE_BF16},
                                                             {"float16", HALO_COMPUTE_DTYPE_FP16}};
  const auto* known = std::find_if(std::begin(kCompute), std::end(kCompute),
                                   [&](const auto& k) { return want == k.first; });
  if (known == std::end(kCompute))
    throw Error(fmt::format(
        "--dtype {}: expected auto, float16 (half), bfloat16 or float32 (float)", requested));
  // A plugin that takes the option "dtype" computes in it, whatever the weights are stored in.
  if (device.compute_dtypes & HALO_DTYPE_BIT(known->second)) return want;
  std::string stored = cfg.torch_dtype.empty() ? "float32" : canonical_dtype(cfg.torch_dtype);
  if (want == stored) return {};
  if (device.compute_dtypes != 0) {
    std::vector<std::string> takes;
    for (const auto& [name, bit] : kCompute)
      if (device.compute_dtypes & HALO_DTYPE_BIT(bit)) takes.push_back(name);
    throw Error(fmt::format(
        "--dtype {}: the {} plugin computes in {} (its option dtype) or the stored dtype ({}). "
        "Use --dtype auto or one of those",
        requested, plugin, fmt::join(takes, " or "), stored));
  }
  throw Error(
      fmt::format("--dtype {}: the checkpoint stores {} weights and the {} plugin runs the weights "
                  "in their stored dtype (it takes no dtype option). Use --dtype auto (or {})",
                  requested, stored, plugin, stored));
}

namespace {

// The operator's own file, named on the command line: a FIFO such as bash's
// <(...) is fine here, unlike the files of model and adapter directories,
// which clients can name (read_file_text refuses anything but a regular file).
std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(fmt::format("--chat-template {}: cannot open the file", p.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<text::ChatTemplate> chat_template(const std::string& option, const fs::path& dir) {
  std::optional<text::ChatTemplate> tpl;
  if (!option.empty()) {
    bool file = fs::exists(option);
    std::string src = file ? read_text(option) : option;
    if (!file && src.find("{%") == std::string::npos && src.find("{{") == std::string::npos)
      throw Error(fmt::format("--chat-template {}: no such file (and not an inline Jinja template)",
                              option));
    tpl.emplace(src);
    return tpl;
  }
  try {
    tpl.emplace(load_chat_template(dir));
  } catch (const Error& e) {
    spdlog::warn(
        "{}: no chat template ({}): /v1/chat/completions needs --chat-template or a per-request "
        "'chat_template'",
        dir.string(), e.what());
  }
  return tpl;
}

std::string origin_of(const ModelSettings& s, const std::string& key) {
  auto it = s.origin.find(key);
  return it == s.origin.end() ? "default" : it->second;
}

// The directory to load: the compiled model, else the model directory or Hub
// id resolved (from the cache; downloaded unless `offline`). Errors name
// where the setting came from.
fs::path model_dir(const ModelSettings& s, bool offline) {
  const bool compiled = !s.compiled_model_dir.empty();
  const std::string key = compiled ? "compiled-model-dir" : "model";
  fs::path dir;
  if (compiled) {
    dir = s.compiled_model_dir;
  } else {
    model::HubOptions hub = s.hub;
    hub.offline = hub.offline || offline;
    try {
      dir = model::resolve_model(s.dir.string(), hub);
    } catch (const Error& e) {
      throw Error(fmt::format("{} (model from {})", e.what(), origin_of(s, key)));
    }
  }
  if (!fs::exists(dir / "config.json") && !model::find_gguf(dir))
    throw Error(
        fmt::format("{}: not a model directory (no config.json) or GGUF file (model from {})",
                    dir.string(), origin_of(s, key)));
  return dir;
}

struct Device {
  std::shared_ptr<device::Plugin> plugin;
  device::DeviceInfo info;
};

}  // namespace

namespace {

// Loads `s` on its device (opened once per device in `devices`), claiming its
// memory in `plan`. Throws halo::Error naming what was wrong.
// --lora-modules, and LMI's adapters beside the model (<model>/adapters/<name>/).
void register_adapters(ServedModel& sm, const ModelSettings& s, const fs::path& dir) {
  if (!sm.loras) {
    if (!s.lora_modules.empty())
      throw Error(fmt::format("model '{}': --lora-modules needs --enable-lora", s.name));
    return;
  }
  std::vector<LoraModule> modules = s.lora_modules;
  std::error_code ec;
  if (fs::is_directory(dir / "adapters", ec))
    for (const auto& d : fs::directory_iterator(dir / "adapters"))
      if (d.is_directory()) modules.push_back({d.path().filename().string(), d.path().string()});
  for (const auto& m : modules) {
    if (std::find(sm.names.begin(), sm.names.end(), m.name) != sm.names.end())
      throw Error(
          fmt::format("model '{}': LoRA adapter '{}' has the model's own name", s.name, m.name));
    sm.loras->load(m.name, m.path);
  }
}

std::shared_ptr<ServedModel> load_one(const ModelSettings& s, const LoadOptions& options,
                                      MemoryPlan& plan, std::map<std::string, Device>& devices) {
  const auto t0 = std::chrono::steady_clock::now();
  const fs::path dir = model_dir(s, false);
  const fs::path tokenizer_dir =
      s.tokenizer.empty() ? dir : model::resolve_model(s.tokenizer, s.hub);
  engine::EngineConfig ec = s.engine;
  const std::string key = fmt::format("{}:{}", ec.device, ec.device_index);
  if (!devices.count(key)) {
    Device d;
    d.plugin = device::Plugin::load(ec.device);
    if (ec.device_index < 0 || ec.device_index >= d.plugin->device_count())
      throw Error(fmt::format("device-index {}: plugin '{}' has {} devices", ec.device_index,
                              ec.device, d.plugin->device_count()));
    d.info = d.plugin->device_info(ec.device_index);
    devices[key] = std::move(d);
  }
  const Device& dev = devices[key];
  int tp = s.tensor_parallel_size == 0 ? std::max(1, dev.info.num_chips) : s.tensor_parallel_size;
  if (tp > 1) {
    if (!(dev.info.capabilities & HALO_CAP_TENSOR_PARALLEL))
      throw Error(
          fmt::format("tensor-parallel-size {}: the {} plugin runs a model on one device. Tensor "
                      "parallelism is the device plugin's business: a plugin that splits a model "
                      "declares HALO_CAP_TENSOR_PARALLEL and takes the option tensor_parallel_size",
                      tp, dev.plugin->name()));
    ec.plugin_options.emplace_back("tensor_parallel_size", std::to_string(tp));
  }
  auto config = model::load_config(dir);
  if (std::string dtype = check_dtype(s.dtype, config, dev.info, dev.plugin->name());
      !dtype.empty())
    ec.plugin_options.emplace_back("dtype", dtype);

  // The memory arithmetic, before anything is loaded.
  const uint64_t free_bytes = dev.info.memory_free_bytes;
  MemoryEstimate need = estimate_memory(s, config, weight_file_bytes(dir),
                                        plan.left(key, free_bytes), dev.info.kv_cache_dtypes);
  if (free_bytes > 0) {
    std::string why = plan.claim(s.name, key, free_bytes, need);
    if (!why.empty()) throw Error(why);
  }
  spdlog::info("model '{}': weights {} + KV cache {} ({}); {} free on {}", s.name,
               human_bytes(need.weights), human_bytes(need.kv), need.kv_source,
               human_bytes(free_bytes), key);

  ec.served_model_name = s.name;
  ec.prefix_hash_seed = options.prefix_hash_seed;
  if (options.kv_events && !ec.enable_prefix_caching)  // enable_for_kv_events turns it on
    throw Error(fmt::format("model '{}': KV cache events describe the prefix cache, which is off", s.name));
  ec.enable_kv_cache_events = options.kv_events != nullptr;
  auto loaded =
      std::make_shared<model::LoadedModel>(model::LoadedModel::load(dir, engine::load_options(ec)));
  auto tokenizer = load_tokenizer(tokenizer_dir);
  auto tpl = chat_template(options.chat_template, tokenizer_dir);
  auto eng = std::make_shared<engine::AsyncEngine>(ec, loaded, std::move(tokenizer));
  if (options.kv_events)
    eng->set_kv_event_sink([pub = options.kv_events, topic = options.kv_events->topic_for(s.name)](
                               std::vector<engine::KvCacheEvent> events) { pub->publish(topic, std::move(events)); });
  std::vector<std::string> names{s.name};
  names.insert(names.end(), s.extra_names.begin(), s.extra_names.end());
  auto sm = ServedModel::make(names, s.dir.string(), eng, std::move(tpl));
  sm->version = s.version;
  sm->max_batch_size = s.max_batch_size;
  sm->reasoning_parser = s.reasoning_parser;
  register_adapters(*sm, s, dir);
  if (s.task == "embed") {
    if (!(eng->engine().device_info().capabilities & HALO_CAP_HIDDEN_STATES))
      throw Error(fmt::format(
          "model '{}': --task embed pools the model's hidden states, which device '{}' does "
          "not return (no HALO_CAP_HIDDEN_STATES, ABI v1.5)",
          s.name, s.engine.device));
    sm->pooling = resolve_pooling(s.pooler_config, dir);
    spdlog::info("model '{}': embeddings pooled {}{}", s.name,
                 engine::pooling_type_name(sm->pooling->type),
                 sm->pooling->normalize ? ", normalised" : "");
  }
  if (s.enable_auto_tool_choice) {
    sm->tool_parser = s.tool_call_parser;
    if (sm->tool_parser.empty() && sm->chat_template)
      sm->tool_parser = tool_parser_for_template(sm->chat_template->source());
  }
  if (!sm->tool_parser.empty() || !sm->reasoning_parser.empty())
    spdlog::info("model '{}': tool calls parsed as {}, reasoning parsed as {}", s.name,
                 sm->tool_parser.empty() ? "(none)" : sm->tool_parser,
                 sm->reasoning_parser.empty() ? "(none)" : sm->reasoning_parser);
  spdlog::info(
      "model {} loaded in {:.2f} s; serving '{}' (max_model_len {}, {} KV blocks of {} tokens)",
      dir.string(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
      s.name, eng->engine().max_model_len(), eng->engine().num_kv_blocks(),
      eng->engine().limits().block_size);
  return sm;
}

}  // namespace

void enable_for_kv_events(ModelSettings& s) {
  if (s.engine.enable_prefix_caching) return;
  s.engine.enable_prefix_caching = true;
  s.origin["enable-prefix-caching"] = "--kv-events-config";
}

size_t load_models(const std::vector<ModelSettings>& models, ServingCore& core,
                   const LoadOptions& options) {
  MemoryPlan plan;
  std::map<std::string, Device> devices;
  size_t served = 0;
  for (const auto& s : models) {
    try {
      core.add_model(load_one(s, options, plan, devices));
      ++served;
    } catch (const std::exception& e) {
      spdlog::error("model '{}' refused: {}", s.name, e.what());
      core.refuse_model(s.name, e.what());
    }
  }
  return served;
}

std::shared_ptr<ServedModel> load_model(const ModelSettings& s, const LoadOptions& options) {
  MemoryPlan plan;
  std::map<std::string, Device> devices;
  return load_one(s, options, plan, devices);
}

std::string check_settings(const ModelSettings& s) {
  fs::path dir;
  try {
    dir = model_dir(s, /*offline=*/true);
  } catch (const Error& e) {
    // A Hub id not in the cache yet is fine: loading downloads it.
    if (s.compiled_model_dir.empty() && !fs::exists(s.dir) && model::looks_like_hub_id(s.dir.string()) &&
        !model::offline_mode(s.hub)) {
      spdlog::info("model '{}': {} is not in the Hugging Face cache yet; it is downloaded when the model loads",
                   s.name, s.dir.string());
      return "";
    }
    return e.what();
  }
  const auto config = [&] { return model::load_config(dir); };
  std::shared_ptr<device::Plugin> plugin;
  device::DeviceInfo info;
  try {  // the device facts; a device this machine lacks is the load's to report
    plugin = device::Plugin::load(s.engine.device);
    info = plugin->device_info(s.engine.device_index);
  } catch (const std::exception& e) {
    spdlog::debug("model '{}': --dtype not checked: {}", s.name, e.what());
    try {
      config();
    } catch (const Error& ce) {
      return ce.what();
    }
    return "";
  }
  try {
    check_dtype(s.dtype, config(), info, plugin->name());
  } catch (const Error& e) {
    return fmt::format("{} (dtype from {})", e.what(), origin_of(s, "dtype"));
  }
  return "";
}

}  // namespace halo::serve
