#include "model/hf_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/file_text.h"

namespace halo::model {

using nlohmann::json;

ModelConfig::ModelConfig() {
  spec.struct_size = sizeof(halo_model_spec);
  repoint();
}
ModelConfig::ModelConfig(const ModelConfig& other)
    : model_type(other.model_type),
      family(other.family),
      spec(other.spec),
      bos_token_id(other.bos_token_id),
      pad_token_id(other.pad_token_id),
      eos_token_ids(other.eos_token_ids),
      torch_dtype(other.torch_dtype),
      max_position_embeddings(other.max_position_embeddings),
      sliding_window(other.sliding_window),
      generation(other.generation),
      architecture_(other.architecture_),
      compiled_model_dir_(other.compiled_model_dir_),
      compiled_target_(other.compiled_target_) {
  repoint();
}
ModelConfig::ModelConfig(ModelConfig&& other) noexcept
    : model_type(std::move(other.model_type)),
      family(other.family),
      spec(other.spec),
      bos_token_id(other.bos_token_id),
      pad_token_id(other.pad_token_id),
      eos_token_ids(std::move(other.eos_token_ids)),
      torch_dtype(std::move(other.torch_dtype)),
      max_position_embeddings(other.max_position_embeddings),
      sliding_window(other.sliding_window),
      generation(other.generation),
      architecture_(std::move(other.architecture_)),
      compiled_model_dir_(std::move(other.compiled_model_dir_)),
      compiled_target_(std::move(other.compiled_target_)) {
  repoint();
  other.repoint();
}
ModelConfig& ModelConfig::operator=(const ModelConfig& other) {
  if (this != &other) {
    ModelConfig copy(other);
    *this = std::move(copy);
  }
  return *this;
}
ModelConfig& ModelConfig::operator=(ModelConfig&& other) noexcept {
  if (this != &other) {
    architecture_ = std::move(other.architecture_);
    compiled_model_dir_ = std::move(other.compiled_model_dir_);
    compiled_target_ = std::move(other.compiled_target_);
    model_type = std::move(other.model_type);
    family = other.family;
    spec = other.spec;
    bos_token_id = other.bos_token_id;
    pad_token_id = other.pad_token_id;
    eos_token_ids = std::move(other.eos_token_ids);
    torch_dtype = std::move(other.torch_dtype);
    max_position_embeddings = other.max_position_embeddings;
    sliding_window = other.sliding_window;
    generation = other.generation;
    repoint();
    other.repoint();
  }
  return *this;
}

namespace {

struct FamilyInfo {
  std::string_view architecture;
  ModelFamily family;
};

constexpr FamilyInfo kFamilies[] = {
    {"LlamaForCausalLM", ModelFamily::kLlama},   {"MistralForCausalLM", ModelFamily::kMistral},
    {"Qwen2ForCausalLM", ModelFamily::kQwen2},   {"Qwen3ForCausalLM", ModelFamily::kQwen3},
    {"Phi3ForCausalLM", ModelFamily::kPhi3},
};

// Defaults of each family's transformers config class (for keys not marked required).
struct FamilyDefaults {
  double rms_norm_eps;
  double rope_theta;
  int32_t max_position_embeddings;
};

FamilyDefaults defaults_for(ModelFamily f) {
  switch (f) {
    case ModelFamily::kLlama: return {1e-6, 10000.0, 2048};
    case ModelFamily::kMistral: return {1e-6, 10000.0, 4096 * 32};
    case ModelFamily::kQwen2: return {1e-6, 10000.0, 32768};
    case ModelFamily::kQwen3: return {1e-6, 10000.0, 32768};
    case ModelFamily::kPhi3: return {1e-5, 10000.0, 4096};
  }
  return {1e-6, 10000.0, 2048};
}

// Upper bounds of the size fields. The loader sizes its tables from these
// before any weight is read, so a config.json saying num_hidden_layers=1e9
// must be refused here, not after allocating for a billion layers. Each is
// well above the largest released model (405B: 126 layers, hidden 16384,
// 128 heads; vocabularies up to ~262k; contexts up to ~10M positions).
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHidden = int64_t{1} << 20;
constexpr int64_t kMaxIntermediate = int64_t{1} << 22;
constexpr int64_t kMaxHeads = int64_t{1} << 14;
constexpr int64_t kMaxHeadDim = int64_t{1} << 14;
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxPositions = int64_t{1} << 26;

// Typed access with errors naming the source, the key and the value seen.
class Reader {
 public:
  Reader(const json& j, std::string source) : j_(j), source_(std::move(source)) {}

  const std::string& source() const { return source_; }
  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const json& at(const char* key) const { return j_.at(key); }

  int64_t integer(const json& v, const std::string& what) const {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw Error(fmt::format("{}: {}={} is out of range", source_, what, v.dump()));
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
      double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
    }
    throw Error(fmt::format("{}: {}={} is not an integer", source_, what, v.dump()));
  }
  int32_t size_field(const char* key, int64_t max) const {
    int64_t x = integer(at(key), key);
    if (x <= 0) throw Error(fmt::format("{}: {}={} must be positive", source_, key, x));
    if (x > max)
      throw Error(fmt::format("{}: {}={} is beyond any real model (at most {} accepted)", source_, key, x, max));
    return static_cast<int32_t>(x);
  }
  int32_t int32(const json& v, const std::string& what) const {
    int64_t x = integer(v, what);
    if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max())
      throw Error(fmt::format("{}: {}={} does not fit in 32 bits", source_, what, x));
    return static_cast<int32_t>(x);
  }
  double number(const json& v, const std::string& what) const {
    if (!v.is_number()) throw Error(fmt::format("{}: {}={} is not a number", source_, what, v.dump()));
    return v.get<double>();
  }

  // A size field: a positive integer no larger than `max` (see kMax*).
  int32_t required_positive(const char* key, int64_t max) const {
    if (!has(key)) throw Error(fmt::format("{}: missing required key '{}'", source_, key));
    return size_field(key, max);
  }
  int32_t positive_or(const char* key, int32_t fallback, int64_t max) const {
    return has(key) ? size_field(key, max) : fallback;
  }
  double number_or(const char* key, double fallback) const {
    return has(key) ? number(at(key), key) : fallback;
  }
  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = at(key);
    if (!v.is_boolean()) throw Error(fmt::format("{}: {}={} is not a boolean", source_, key, v.dump()));
    return v.get<bool>();
  }
  std::string string_or(const char* key, std::string fallback) const {
    if (!has(key)) return fallback;
    const json& v = at(key);
    if (!v.is_string()) throw Error(fmt::format("{}: {}={} is not a string", source_, key, v.dump()));
    return v.get<std::string>();
  }
  // An id given as an int or a list of ints (eos_token_id); absent -> empty.
  std::vector<int32_t> id_list(const char* key) const {
    std::vector<int32_t> out;
    if (!has(key)) return out;
    const json& v = at(key);
    if (v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i) out.push_back(int32(v[i], fmt::format("{}[{}]", key, i)));
    } else {
      out.push_back(int32(v, key));
    }
    return out;
  }

 private:
  const json& j_;
  std::string source_;
};

json read_json_file(const std::filesystem::path& path) {
  const std::string text = read_file_text(path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: malformed JSON: {}", path.string(), e.what()));
  }
}

void parse_rope(const Reader& r, const json& rope_scaling, ModelConfig& cfg) {
  halo_model_spec& s = cfg.spec;
  const std::string& src = r.source();
  if (rope_scaling.is_null()) return;
  if (!rope_scaling.is_object())
    throw Error(fmt::format("{}: rope_scaling={} is not an object", src, rope_scaling.dump()));
  Reader rs(rope_scaling, src);
  std::string type = rs.string_or("rope_type", rs.string_or("type", ""));
  if (type.empty())
    throw Error(fmt::format("{}: rope_scaling={} has no 'rope_type' or 'type'", src, rope_scaling.dump()));
  if (type == "default") return;
  if (cfg.family == ModelFamily::kPhi3 && type != "linear") {
    throw Error(fmt::format(
        "{}: rope_scaling type '{}' is not supported for Phi3ForCausalLM (only unscaled RoPE is; "
        "use a 4k-context Phi-3 checkpoint)",
        src, type));
  }
  auto factor = [&]() {
    if (!rs.has("factor")) throw Error(fmt::format("{}: rope_scaling '{}' lacks 'factor'", src, type));
    double f = rs.number(rs.at("factor"), "rope_scaling.factor");
    if (!(f > 0)) throw Error(fmt::format("{}: rope_scaling.factor={} must be positive", src, f));
    return static_cast<float>(f);
  };
  if (type == "linear") {
    s.rope_scaling = HALO_ROPE_SCALING_LINEAR;
    s.rope_factor = factor();
  } else if (type == "llama3") {
    s.rope_scaling = HALO_ROPE_SCALING_LLAMA3;
    s.rope_factor = factor();
    for (const char* key : {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
      if (!rs.has(key)) throw Error(fmt::format("{}: rope_scaling 'llama3' lacks '{}'", src, key));
    }
    s.rope_low_freq_factor = static_cast<float>(rs.number(rs.at("low_freq_factor"), "rope_scaling.low_freq_factor"));
    s.rope_high_freq_factor =
        static_cast<float>(rs.number(rs.at("high_freq_factor"), "rope_scaling.high_freq_factor"));
    s.rope_original_max_position = rs.int32(rs.at("original_max_position_embeddings"),
                                            "rope_scaling.original_max_position_embeddings");
    if (!(s.rope_low_freq_factor > 0) || !(s.rope_high_freq_factor > s.rope_low_freq_factor))
      throw Error(fmt::format("{}: rope_scaling llama3 needs 0 < low_freq_factor={} < high_freq_factor={}", src,
                              s.rope_low_freq_factor, s.rope_high_freq_factor));
    if (s.rope_original_max_position <= 0)
      throw Error(fmt::format("{}: rope_scaling.original_max_position_embeddings={} must be positive", src,
                              s.rope_original_max_position));
  } else {
    throw Error(fmt::format("{}: rope_scaling type '{}' is not supported (supported: linear, llama3)", src, type));
  }
}

// architectures[0] -> cfg's architecture and family (and model_type).
void parse_architecture(const Reader& r, ModelConfig& cfg) {
  const std::string& source = r.source();
  if (!r.has("architectures"))
    throw Error(fmt::format("{}: missing required key 'architectures' (supported: {})", source,
                            fmt::join(supported_architectures(), ", ")));
  const json& archs = r.at("architectures");
  if (!archs.is_array() || archs.empty() || !archs[0].is_string())
    throw Error(fmt::format("{}: architectures={} is not a non-empty list of strings", source, archs.dump()));
  if (archs.size() > 1) spdlog::warn("{}: several architectures listed, using the first ({})", source, archs[0].get<std::string>());
  cfg.set_architecture(archs[0].get<std::string>());
  bool found = false;
  for (const auto& f : kFamilies) {
    if (f.architecture == cfg.architecture()) {
      cfg.family = f.family;
      found = true;
    }
  }
  if (!found)
    throw Error(fmt::format("{}: unsupported architecture '{}' (supported: {})", source, cfg.architecture(),
                            fmt::join(supported_architectures(), ", ")));
  cfg.model_type = r.string_or("model_type", "");
}

// The sizes, head_dim, positions, rms_norm_eps and RoPE of cfg.spec.
void parse_shape(const Reader& r, const FamilyDefaults& d, ModelConfig& cfg) {
  const std::string& source = r.source();
  halo_model_spec& s = cfg.spec;
  s.struct_size = sizeof(halo_model_spec);
  s.vocab_size = r.required_positive("vocab_size", kMaxVocab);
  s.hidden_size = r.required_positive("hidden_size", kMaxHidden);
  s.intermediate_size = r.required_positive("intermediate_size", kMaxIntermediate);
  s.num_layers = r.required_positive("num_hidden_layers", kMaxLayers);
  s.num_heads = r.required_positive("num_attention_heads", kMaxHeads);
  s.num_kv_heads = r.positive_or("num_key_value_heads", s.num_heads, kMaxHeads);
  if (s.num_heads % s.num_kv_heads != 0)
    throw Error(fmt::format("{}: num_key_value_heads={} does not divide num_attention_heads={}", source,
                            s.num_kv_heads, s.num_heads));

  // head_dim: Phi3Config has no such key (always hidden/heads); the others
  // honour an explicit one (Qwen3 always has it, its class default is 128).
  if (cfg.family != ModelFamily::kPhi3 && r.has("head_dim")) {
    s.head_dim = r.positive_or("head_dim", 0, kMaxHeadDim);
  } else if (cfg.family == ModelFamily::kQwen3 && !r.has("head_dim")) {
    s.head_dim = 128;
  } else {
    if (s.hidden_size % s.num_heads != 0)
      throw Error(fmt::format("{}: num_attention_heads={} does not divide hidden_size={} (and no head_dim given)",
                              source, s.num_heads, s.hidden_size));
    s.head_dim = s.hidden_size / s.num_heads;
  }
  if (cfg.family == ModelFamily::kPhi3 && s.hidden_size % s.num_heads != 0)
    throw Error(fmt::format("{}: num_attention_heads={} does not divide hidden_size={}", source, s.num_heads,
                            s.hidden_size));

  s.max_position_embeddings = r.positive_or("max_position_embeddings", d.max_position_embeddings, kMaxPositions);
  cfg.max_position_embeddings = s.max_position_embeddings;
  double eps = r.number_or("rms_norm_eps", d.rms_norm_eps);
  if (!(eps > 0) || !std::isfinite(eps))
    throw Error(fmt::format("{}: rms_norm_eps={} must be positive", source, eps));
  s.rms_norm_eps = static_cast<float>(eps);

  // RoPE: newer transformers nest rope_theta and the scaling in rope_parameters.
  const json* rope_params = (r.has("rope_parameters") && r.at("rope_parameters").is_object())
                                ? &r.at("rope_parameters")
                                : nullptr;
  double theta = r.number_or("rope_theta", d.rope_theta);
  if (rope_params && rope_params->contains("rope_theta"))
    theta = r.number(rope_params->at("rope_theta"), "rope_parameters.rope_theta");
  if (!(theta > 0) || !std::isfinite(theta))
    throw Error(fmt::format("{}: rope_theta={} must be positive", source, theta));
  s.rope_theta = static_cast<float>(theta);
  s.rope_scaling = HALO_ROPE_SCALING_NONE;
  s.rope_factor = 1.0f;
  s.rope_low_freq_factor = 0.0f;
  s.rope_high_freq_factor = 0.0f;
  s.rope_original_max_position = 0;
  if (r.has("rope_scaling")) {
    parse_rope(r, r.at("rope_scaling"), cfg);
  } else if (rope_params) {
    parse_rope(r, *rope_params, cfg);
  }
}

// Rotary fraction, activation, bias and tying flags, sliding window, dtype.
void parse_features(const Reader& r, ModelConfig& cfg) {
  const std::string& source = r.source();
  halo_model_spec& s = cfg.spec;
  if (r.has("partial_rotary_factor")) {
    double p = r.number(r.at("partial_rotary_factor"), "partial_rotary_factor");
    if (p != 1.0)
      throw Error(fmt::format("{}: partial_rotary_factor={} is not supported (only 1.0: RoPE over the whole head)",
                              source, p));
  }

  std::string act = r.string_or("hidden_act", "silu");
  if (act == "silu" || act == "swish") {
    s.activation = HALO_ACTIVATION_SILU;
  } else if (act == "gelu_pytorch_tanh" || act == "gelu_tanh") {
    s.activation = HALO_ACTIVATION_GELU_TANH;
  } else {
    throw Error(fmt::format("{}: hidden_act='{}' is not supported (supported: silu, gelu_pytorch_tanh)", source, act));
  }

  s.flags = 0;
  // Every supported config class defaults tie_word_embeddings to false.
  if (r.boolean_or("tie_word_embeddings", false)) s.flags |= HALO_MODEL_TIED_EMBEDDINGS;
  if (cfg.family == ModelFamily::kQwen2) s.flags |= HALO_MODEL_QKV_BIAS;
  if (cfg.family == ModelFamily::kQwen3) s.flags |= HALO_MODEL_QK_NORM;
  if ((cfg.family == ModelFamily::kLlama || cfg.family == ModelFamily::kQwen3) &&
      r.boolean_or("attention_bias", false))
    throw Error(fmt::format("{}: attention_bias=true is not supported (it adds an o_proj bias)", source));
  if (cfg.family == ModelFamily::kLlama && r.boolean_or("mlp_bias", false))
    throw Error(fmt::format("{}: mlp_bias=true is not supported", source));

  // Sliding window: only a declared, active window matters.
  bool sliding_active = true;
  if (cfg.family == ModelFamily::kQwen2 || cfg.family == ModelFamily::kQwen3)
    sliding_active = r.boolean_or("use_sliding_window", false);
  if (sliding_active && r.has("sliding_window")) {
    cfg.sliding_window = r.int32(r.at("sliding_window"), "sliding_window");
    spdlog::warn("{}: sliding_window={} is ignored: halo attends to the whole context (identical results "
                 "while a sequence is no longer than the window)",
                 source, *cfg.sliding_window);
  }

  cfg.torch_dtype = r.string_or("torch_dtype", r.string_or("dtype", ""));
}

// bos/eos/pad ids (generation_config.json's eos first, then config.json's)
// and the generation defaults.
void parse_token_ids(const Reader& r, const json* generation, ModelConfig& cfg) {
  const std::string& source = r.source();
  const halo_model_spec& s = cfg.spec;
  std::vector<int32_t> eos;
  std::optional<int32_t> bos;
  if (r.has("bos_token_id")) bos = r.int32(r.at("bos_token_id"), "bos_token_id");
  if (r.has("pad_token_id")) cfg.pad_token_id = r.int32(r.at("pad_token_id"), "pad_token_id");
  std::vector<int32_t> config_eos = r.id_list("eos_token_id");
  if (generation != nullptr) {
    std::string gsource = (std::filesystem::path(source).parent_path() / "generation_config.json").string();
    if (!generation->is_object()) throw Error(fmt::format("{}: top level is not a JSON object", gsource));
    Reader g(*generation, gsource);
    eos = g.id_list("eos_token_id");
    if (g.has("bos_token_id")) bos = g.int32(g.at("bos_token_id"), "bos_token_id");
    GenerationDefaults& gd = cfg.generation;
    if (g.has("do_sample")) gd.do_sample = g.boolean_or("do_sample", false);
    if (g.has("temperature")) gd.temperature = static_cast<float>(g.number(g.at("temperature"), "temperature"));
    if (g.has("top_p")) gd.top_p = static_cast<float>(g.number(g.at("top_p"), "top_p"));
    if (g.has("top_k")) gd.top_k = g.int32(g.at("top_k"), "top_k");
    if (g.has("repetition_penalty"))
      gd.repetition_penalty = static_cast<float>(g.number(g.at("repetition_penalty"), "repetition_penalty"));
    if (g.has("max_new_tokens")) gd.max_new_tokens = g.int32(g.at("max_new_tokens"), "max_new_tokens");
    if (g.has("max_length")) gd.max_length = g.int32(g.at("max_length"), "max_length");
  }
  for (int32_t id : config_eos) {
    if (std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
  }
  cfg.eos_token_ids = std::move(eos);
  cfg.bos_token_id = bos;
  for (int32_t id : cfg.eos_token_ids) {
    if (id < 0) throw Error(fmt::format("{}: eos_token_id={} is negative", source, id));
    if (id >= s.vocab_size)
      spdlog::warn("{}: eos_token_id={} lies outside the vocabulary (vocab_size={}); it can never be generated",
                   source, id, s.vocab_size);
  }
  if (bos && (*bos < 0 || *bos >= s.vocab_size))
    throw Error(fmt::format("{}: bos_token_id={} outside the vocabulary (vocab_size={})", source, *bos, s.vocab_size));
}

}  // namespace

const std::vector<std::string_view>& supported_architectures() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> v;
    for (const auto& f : kFamilies) v.push_back(f.architecture);
    return v;
  }();
  return names;
}

ModelConfig parse_model_config(const json& config, const json* generation,
                               const std::string& source) {
  if (!config.is_object()) throw Error(fmt::format("{}: top level is not a JSON object", source));
  Reader r(config, source);
  ModelConfig cfg;

  parse_architecture(r, cfg);
  const FamilyDefaults d = defaults_for(cfg.family);
  parse_shape(r, d, cfg);
  parse_features(r, cfg);
  parse_token_ids(r, generation, cfg);
  return cfg;
}

ModelConfig load_model_config(const std::filesystem::path& model_dir) {
  const std::filesystem::path config_path = model_dir / "config.json";
  if (!std::filesystem::exists(config_path))
    throw Error(fmt::format("{}: not found (is {} a Hugging Face model directory?)", config_path.string(),
                            model_dir.string()));
  json config = read_json_file(config_path);
  const std::filesystem::path gen_path = model_dir / "generation_config.json";
  if (std::filesystem::exists(gen_path)) {
    json gen = read_json_file(gen_path);
    return parse_model_config(config, &gen, config_path.string());
  }
  return parse_model_config(config, nullptr, config_path.string());
}

}  // namespace halo::model
