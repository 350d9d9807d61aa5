#include "model/lora_adapter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/file_text.h"
#include "common/half.h"
#include "common/json_depth.h"
#include "model/safetensors.h"
#include "model/weight_map.h"

namespace halo::model {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr std::string_view kPrefix = "base_model.model.";

// A pattern of adapter_config.json compiled; `suffix`: PEFT's pattern keys
// match a module name whole or as its dotted suffix.
LoraPattern compile_pattern(const std::string& key, double value, bool suffix) {
  if (key.size() > 256)
    throw Error(fmt::format("adapter_config.json: pattern '{}...' is longer than 256 characters",
                            key.substr(0, 32)));
  try {
    auto dfa = text::guided::ByteDfa::compile(suffix ? "(.*\\.)?(" + key + ")" : key, 4096);
    return {key, value, std::make_shared<const text::guided::ByteDfa>(std::move(dfa))};
  } catch (const Error& e) {
    throw Error(
        fmt::format("adapter_config.json: pattern '{}' is not a regular expression halo takes ({})",
                    key, e.what()));
  }
}

std::vector<LoraPattern> patterns(const json& j, const char* key, bool integer) {
  std::vector<LoraPattern> out;
  if (!j.contains(key) || j[key].is_null()) return out;
  if (!j[key].is_object())
    throw Error(fmt::format("adapter_config.json: {} must be an object", key));
  for (const auto& [k, v] : j[key].items()) {
    if (!v.is_number() || v.get<double>() <= 0 || (integer && !v.is_number_integer()))
      throw Error(fmt::format("adapter_config.json: {}['{}'] must be a positive {}", key, k,
                              integer ? "integer" : "number"));
    out.push_back(compile_pattern(k, v.get<double>(), true));
  }
  return out;
}

void refuse_unsupported(const json& j) {
  auto set = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
  if (set("peft_type") && j["peft_type"] != "LORA")
    throw Error(fmt::format(
        "adapter_config.json: peft_type {} is not LORA (halo applies LoRA adapters only)",
        j["peft_type"].dump()));
  if (set("use_dora") && j["use_dora"] == true)
    throw Error("adapter_config.json: use_dora is set: DoRA adapters are not supported");
  if (set("modules_to_save") && !(j["modules_to_save"].is_array() && j["modules_to_save"].empty()))
    throw Error(fmt::format(
        "adapter_config.json: modules_to_save {} is not supported (whole trained copies of "
        "modules; halo applies low-rank updates only)",
        j["modules_to_save"].dump()));
  if (set("bias") && j["bias"] != "none")
    throw Error(fmt::format("adapter_config.json: bias {} is not supported (only \"none\")",
                            j["bias"].dump()));
  if (set("fan_in_fan_out") && j["fan_in_fan_out"] == true)
    throw Error(
        "adapter_config.json: fan_in_fan_out (Conv1D layers, GPT-2 style) is not supported");
}

std::vector<float> to_f32(const SafetensorsFile& f, const TensorInfo& t) {
  const size_t n = t.nbytes / std::max<size_t>(1, dtype_size(t.dtype));
  std::vector<float> out(n);
  const std::byte* p = f.tensor_data(t);
  for (size_t i = 0; i < n; ++i) {
    if (t.dtype == SafetensorsDType::kF32) {
      std::memcpy(&out[i], p + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      out[i] = t.dtype == SafetensorsDType::kBF16 ? bf16_to_float(h) : fp16_to_float(h);
    }
  }
  return out;
}

struct Pair {
  const TensorInfo* a = nullptr;
  const TensorInfo* b = nullptr;
};

// The file's tensors by Hugging Face module name; anything but lora_A/lora_B
// of a module is refused by name.
std::map<std::string, Pair> pair_tensors(const SafetensorsFile& f) {
  std::map<std::string, Pair> modules;
  for (const auto& [name, info] : f.tensors()) {
    if (name.find("lora_embedding") != std::string::npos)
      throw Error(
          fmt::format("{}: embedding adapters (lora_embedding_A/B) are not supported", name));
    const bool is_a = name.ends_with(".lora_A.weight"), is_b = name.ends_with(".lora_B.weight");
    if ((!is_a && !is_b) || !name.starts_with(kPrefix))
      throw Error(fmt::format(
          "{}: not a LoRA weight (base_model.model.<module>.lora_A/lora_B.weight)", name));
    if (!is_weight_dtype(info.dtype))
      throw Error(fmt::format("{}: dtype {} (LoRA weights are F32, BF16 or F16)", name,
                              dtype_name(info.dtype)));
    const std::string module = name.substr(
        kPrefix.size(), name.size() - kPrefix.size() - std::string_view(".lora_A.weight").size());
    (is_a ? modules[module].a : modules[module].b) = &info;
  }
  return modules;
}

}  // namespace

LoraConfig parse_lora_config(const std::string& json_text) {
  json j;
  try {
    // PEFT writes a flat object with lists of names: 16 levels is ample.
    j = parse_json_bounded(json_text, 16);
  } catch (const JsonTooDeep& e) {
    throw Error(fmt::format("adapter_config.json: {}", e.what()));
  } catch (const json::exception& e) {
    throw Error(fmt::format("adapter_config.json: not valid JSON ({})", e.what()));
  }
  if (!j.is_object()) throw Error("adapter_config.json: expected a JSON object");
  refuse_unsupported(j);
  LoraConfig c;
  if (!j.contains("r") || !j["r"].is_number_integer() || j["r"].get<int64_t>() < 1 ||
      j["r"].get<int64_t>() > 65536)
    throw Error("adapter_config.json: r must be a positive integer");
  c.r = j["r"].get<int>();
  if (j.contains("lora_alpha") && !j["lora_alpha"].is_null()) {
    if (!j["lora_alpha"].is_number() || !(j["lora_alpha"].get<double>() > 0))
      throw Error("adapter_config.json: lora_alpha must be a positive number");
    c.lora_alpha = j["lora_alpha"].get<double>();
  }
  if (j.contains("use_rslora") && j["use_rslora"].is_boolean())
    c.use_rslora = j["use_rslora"].get<bool>();
  const json& t = j.contains("target_modules") ? j["target_modules"] : json();
  if (t.is_string()) {
    c.target_regex = compile_pattern(t.get<std::string>(), 0, false);
  } else if (t.is_array() && !t.empty()) {
    for (const auto& m : t) {
      if (!m.is_string()) throw Error("adapter_config.json: target_modules must hold strings");
      c.target_modules.push_back(m.get<std::string>());
    }
  } else {
    throw Error(
        "adapter_config.json: target_modules must be a module list or a regular expression");
  }
  c.rank_pattern = patterns(j, "rank_pattern", true);
  c.alpha_pattern = patterns(j, "alpha_pattern", false);
  if (j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string())
    c.base_model = j["base_model_name_or_path"].get<std::string>();
  return c;
}

bool lora_targets(const LoraConfig& c, const std::string& module) {
  if (c.target_regex.dfa) return c.target_regex.matches(module);
  for (const auto& t : c.target_modules)
    if (t == "all-linear" || module == t || module.ends_with("." + t)) return true;
  return false;
}

int lora_rank_for(const LoraConfig& c, const std::string& module) {
  for (const auto& p : c.rank_pattern)
    if (p.matches(module)) return static_cast<int>(p.value);
  return c.r;
}

double lora_alpha_for(const LoraConfig& c, const std::string& module) {
  for (const auto& p : c.alpha_pattern)
    if (p.matches(module)) return p.value;
  return c.lora_alpha;
}

int LoraAdapter::max_rank() const {
  int r = 0;
  for (const auto& w : weights) r = std::max(r, w.rank);
  return r;
}

LoraAdapter LoraAdapter::load(const fs::path& dir, const ModelConfig& base, int max_rank) {
  LoraAdapter ad;
  ad.dir = dir;
  const fs::path cfg = dir / "adapter_config.json", file = dir / "adapter_model.safetensors";
  if (!fs::exists(cfg))
    throw Error(
        fmt::format("{}: no adapter_config.json (a PEFT LoRA adapter directory)", dir.string()));
  if (!fs::exists(file))
    throw Error(
        fmt::format("{}: no adapter_model.safetensors{}", dir.string(),
                    fs::exists(dir / "adapter_model.bin")
                        ? " (adapter_model.bin is a pickle, which halo does not read: save with "
                          "safe_serialization=True)"
                        : ""));
  ad.config = parse_lora_config(read_file_text(cfg));
  const SafetensorsFile f(file);
  // The base's projections by Hugging Face module (Phi-3's fused ones give several).
  std::map<std::string, std::vector<WeightSource>> by_module;
  std::vector<std::string> order;
  for (const auto& ws : expected_weights(base)) {
    if (!is_projection_weight(ws.canonical)) continue;
    order.push_back(ws.canonical);
    by_module[ws.hf_name.substr(0, ws.hf_name.size() - std::string_view(".weight").size())]
        .push_back(ws);
  }
  for (const auto& [module, pair] : pair_tensors(f)) {
    const auto it = by_module.find(module);
    if (it == by_module.end())
      throw Error(fmt::format("{}: module {} is not a projection of the base model ({})",
                              file.string(), module, base.architecture()));
    if (it->second.front().canonical == "lm_head")
      throw Error(fmt::format("{}: lm_head adapters are not supported", file.string()));
    if (!lora_targets(ad.config, module))
      throw Error(
          fmt::format("{}: {} has weights but is not in target_modules", file.string(), module));
    if (!pair.a || !pair.b)
      throw Error(fmt::format("{}: {} has lora_{} but not lora_{}", file.string(), module,
                              pair.a ? "A" : "B", pair.a ? "B" : "A"));
    const auto& hf = it->second.front().hf_shape;  // [out_total, in]
    const int64_t rank = pair.a->shape.empty() ? 0 : pair.a->shape[0];
    if (pair.a->shape.size() != 2 || pair.b->shape.size() != 2 || pair.a->shape[1] != hf[1] ||
        pair.b->shape[0] != hf[0] || pair.b->shape[1] != rank)
      throw Error(
          fmt::format("{}: {}: lora_A {} and lora_B {} do not fit the base's [{}, {}] (want [r, "
                      "{}] and [{}, r])",
                      file.string(), module, fmt::join(pair.a->shape, "x"),
                      fmt::join(pair.b->shape, "x"), hf[0], hf[1], hf[1], hf[0]));
    if (rank != lora_rank_for(ad.config, module))
      throw Error(fmt::format("{}: {} has rank {} but adapter_config.json says {}", file.string(),
                              module, rank, lora_rank_for(ad.config, module)));
    if (max_rank > 0 && rank > max_rank)
      throw Error(fmt::format("{}: {} has rank {}, above --max-lora-rank {}", dir.string(), module,
                              rank, max_rank));
    const double alpha = lora_alpha_for(ad.config, module);
    const float scale =
        static_cast<float>(ad.config.use_rslora ? alpha / std::sqrt(double(rank)) : alpha / rank);
    if (!std::isfinite(scale))
      throw Error(fmt::format("{}: {}: lora_alpha {} over rank {} is not a finite scale",
                              file.string(), module, alpha, rank));
    const std::vector<float> a = to_f32(f, *pair.a), b = to_f32(f, *pair.b);
    // A NaN or Inf weight would turn every logit of the adapter's requests into NaN.
    for (const auto* w : {&a, &b})
      if (!std::all_of(w->begin(), w->end(), [](float x) { return std::isfinite(x); }))
        throw Error(fmt::format("{}: {}: lora_{} holds NaN or Inf", file.string(), module,
                                w == &a ? "A" : "B"));
    for (const auto& ws : it->second) {  // a fused module: B's rows per canonical slice
      LoraWeight w{ws.canonical, static_cast<int>(rank), scale, hf[1], ws.shape[0], a, {}};
      w.b.assign(b.begin() + ws.row_begin * rank, b.begin() + (ws.row_begin + ws.shape[0]) * rank);
      ad.weights.push_back(std::move(w));
    }
  }
  if (ad.weights.empty()) throw Error(fmt::format("{}: no LoRA weights", file.string()));
  std::sort(ad.weights.begin(), ad.weights.end(), [&](const LoraWeight& x, const LoraWeight& y) {
    return std::find(order.begin(), order.end(), x.canonical) <
           std::find(order.begin(), order.end(), y.canonical);
  });
  return ad;
}

}  // namespace halo::model
