#include "model/gguf_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/ggml_blocks.h"
#include "model/weight_map.h"

namespace halo::model {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct ArchEntry {
  std::string_view gguf;
  std::string_view hf;
};

// general.architecture -> the Hugging Face architecture it is converted from
// (llama.cpp writes Mistral checkpoints as llama too).
constexpr ArchEntry kArchs[] = {
    {"llama", "LlamaForCausalLM"},
    {"qwen2", "Qwen2ForCausalLM"},
    {"qwen3", "Qwen3ForCausalLM"},
    {"phi3", "Phi3ForCausalLM"},
};

bool has_suffix(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Reads {arch}.* keys with errors naming the file and key.
class Meta {
 public:
  Meta(const GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}
  std::string key(std::string_view k) const { return fmt::format("{}.{}", arch_, k); }
  int64_t required_int(std::string_view k) const {
    auto v = f_.get_int(key(k));
    if (!v) throw Error(fmt::format("{}: missing metadata key '{}'", f_.path().string(), key(k)));
    return *v;
  }
  std::optional<int64_t> int_or(std::string_view k) const { return f_.get_int(key(k)); }
  std::optional<double> number(std::string_view k) const { return f_.get_float(key(k)); }

 private:
  const GgufFile& f_;
  std::string arch_;
};

std::string architecture_of(const GgufFile& f) {
  const std::optional<std::string> arch = f.get_string("general.architecture");
  if (!arch)
    throw Error(fmt::format("{}: missing metadata key 'general.architecture'", f.path().string()));
  for (const auto& a : kArchs)
    if (a.gguf == *arch) return *arch;
  std::vector<std::string_view> names;
  for (const auto& a : kArchs) names.push_back(a.gguf);
  throw Error(fmt::format("{}: unsupported general.architecture '{}' (supported: {})",
                          f.path().string(), *arch, fmt::join(names, ", ")));
}

std::string_view hf_architecture(const std::string& arch) {
  for (const auto& a : kArchs)
    if (a.gguf == arch) return a.hf;
  return "";
}

// torch_dtype as the serving code reads it (the KV cache and compute types
// it picks by default): the type of the first attention projection.
std::string stored_dtype(const GgufFile& f) {
  const GgufTensor* t = f.find("blk.0.attn_q.weight");
  if (t == nullptr) t = f.find("blk.0.attn_qkv.weight");
  if (t == nullptr) return "";
  switch (static_cast<GgmlType>(t->type)) {
    case GgmlType::kF32:
      return "float32";
    case GgmlType::kBF16:
      return "bfloat16";
    default:
      return "float16";
  }
}

// llama3 rope scaling, which llama.cpp stores as the per-frequency divisors
// of tensor rope_freqs rather than as keys: recovered as the scaling with
// low_freq_factor 1, high_freq_factor 4 and 8192 original positions (Llama
// 3.1 / 3.2) whose divisors match, else refused.
std::optional<json> llama3_scaling(const GgufFile& f, int64_t head_dim, double theta) {
  const GgufTensor* t = f.find("rope_freqs.weight");
  if (t == nullptr) return std::nullopt;
  const std::string fname = f.path().string();
  if (!ggml_is_plain(t->type) || t->dims.size() != 1 || t->cols() * 2 != head_dim)
    throw Error(fmt::format("{}: tensor 'rope_freqs.weight' ({}, shape {}) is not {} plain values",
                            fname, ggml_type_name(t->type), shape_str(t->shape()), head_dim / 2));
  std::vector<float> got(static_cast<size_t>(t->cols()));
  ggml_dequantize_row(t->type, t->data, t->cols(), got.data());
  const double factor = *std::max_element(got.begin(), got.end());
  if (factor == 1.0) return std::nullopt;
  const double low = 1.0, high = 4.0, orig = 8192.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double wavelen =
        2 * std::numbers::pi * std::pow(theta, 2.0 * static_cast<double>(i) / head_dim);
    double want = 1.0;
    if (wavelen > orig / low) {
      want = factor;
    } else if (wavelen >= orig / high) {
      const double smooth = (orig / wavelen - low) / (high - low);
      want = 1.0 / ((1 - smooth) / factor + smooth);
    }
    if (!(std::fabs(got[i] - want) <= 1e-3 * want))
      throw Error(fmt::format(
          "{}: tensor 'rope_freqs.weight' is not llama3 rope scaling (factor {}, "
          "low_freq_factor 1, high_freq_factor 4, 8192 positions): element {} is {}, expected {}",
          fname, factor, i, got[i], want));
  }
  return json{{"rope_type", "llama3"},
              {"factor", factor},
              {"low_freq_factor", low},
              {"high_freq_factor", high},
              {"original_max_position_embeddings", static_cast<int64_t>(orig)}};
}

// rope_scaling from {arch}.rope.scaling.* (or the older rope.scale_linear).
std::optional<json> rope_scaling(const GgufFile& f, const Meta& m) {
  const std::optional<std::string> type = f.get_string(m.key("rope.scaling.type"));
  std::optional<double> factor = m.number("rope.scaling.factor");
  if (!type && m.number("rope.scale_linear"))
    return json{{"type", "linear"}, {"factor", *m.number("rope.scale_linear")}};
  if (!type || *type == "none") return std::nullopt;
  json r{{"type", *type}};
  if (factor) r["factor"] = *factor;
  return r;
}

// The token ids: bos, eos (then eot / eom, which chat models end turns with).
void add_token_ids(const GgufFile& f, json& c) {
  if (auto bos = f.get_int("tokenizer.ggml.bos_token_id")) c["bos_token_id"] = *bos;
  if (auto pad = f.get_int("tokenizer.ggml.padding_token_id")) c["pad_token_id"] = *pad;
  json eos = json::array();
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    auto id = f.get_int(key);
    if (id && std::find(eos.begin(), eos.end(), json(*id)) == eos.end()) eos.push_back(*id);
  }
  if (!eos.empty()) c["eos_token_id"] = eos;
}

// The config.json a Hugging Face checkpoint of this file would have.
json equivalent_config(const GgufFile& f) {
  const std::string arch = architecture_of(f);
  const Meta m(f, arch);
  const GgufTensor* embd = f.find("token_embd.weight");
  if (embd == nullptr || embd->dims.size() != 2)
    throw Error(
        fmt::format("{}: missing tensor 'token_embd.weight' [vocab, hidden] (its shape gives the "
                    "vocabulary size)",
                    f.path().string()));
  json c{{"architectures", {hf_architecture(arch)}},
         {"model_type", arch},
         {"vocab_size", embd->dims[1]},
         {"hidden_size", m.required_int("embedding_length")},
         {"intermediate_size", m.required_int("feed_forward_length")},
         {"num_hidden_layers", m.required_int("block_count")},
         {"num_attention_heads", m.required_int("attention.head_count")},
         {"hidden_act", "silu"},
         {"tie_word_embeddings", f.find("output.weight") == nullptr},
         {"torch_dtype", stored_dtype(f)}};
  if (auto kv = m.int_or("attention.head_count_kv")) c["num_key_value_heads"] = *kv;
  if (auto ctx = m.int_or("context_length")) c["max_position_embeddings"] = *ctx;
  if (auto eps = m.number("attention.layer_norm_rms_epsilon")) c["rms_norm_eps"] = *eps;
  if (auto theta = m.number("rope.freq_base")) c["rope_theta"] = *theta;
  const int64_t heads = std::max<int64_t>(1, c["num_attention_heads"].get<int64_t>());
  const int64_t head_dim =
      m.int_or("attention.key_length").value_or(c["hidden_size"].get<int64_t>() / heads);
  // Always explicit: GGUF's default is hidden / heads (llama.cpp's), while a
  // family's config.json default may differ (Qwen3Config: 128).
  c["head_dim"] = head_dim;
  if (auto v = m.int_or("attention.value_length"); v && *v != head_dim)
    throw Error(fmt::format("{}: {}={} differs from the key length {} (not supported)",
                            f.path().string(), m.key("attention.value_length"), *v, head_dim));
  if (auto rot = m.int_or("rope.dimension_count"); rot && *rot != head_dim && head_dim > 0)
    c["partial_rotary_factor"] = static_cast<double>(*rot) / static_cast<double>(head_dim);
  if (auto r = rope_scaling(f, m)) c["rope_scaling"] = *r;
  if (auto r = llama3_scaling(f, head_dim, c.value("rope_theta", 10000.0))) c["rope_scaling"] = *r;
  if (f.find("rope_factors_long.weight") != nullptr)
    throw Error(fmt::format(
        "{}: tensor 'rope_factors_long.weight': longrope scaling is not supported (use a "
        "4k-context Phi-3)",
        f.path().string()));
  add_token_ids(f, c);
  return c;
}

// ---------------------------------------------------------------- weights

// A Hugging Face tensor name (weight_map.h) -> its GGUF name.
std::string gguf_name(const std::string& hf) {
  static const std::pair<std::string_view, std::string_view> kLayer[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.qkv_proj.weight", "attn_qkv.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.gate_up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  const size_t dot = hf.find('.', prefix.size());
  const std::string rest = hf.substr(dot + 1);
  for (const auto& [from, to] : kLayer)
    if (rest == from)
      return fmt::format("blk.{}.{}", hf.substr(prefix.size(), dot - prefix.size()), to);
  return hf;
}

bool is_projection(const std::string& canonical) {
  const std::string_view last = std::string_view(canonical).substr(canonical.rfind('.') + 1);
  for (std::string_view s :
       {HALO_WEIGHT_Q_PROJ, HALO_WEIGHT_K_PROJ, HALO_WEIGHT_V_PROJ, HALO_WEIGHT_O_PROJ,
        HALO_WEIGHT_GATE_PROJ, HALO_WEIGHT_UP_PROJ, HALO_WEIGHT_DOWN_PROJ, HALO_WEIGHT_LM_HEAD})
    if (last == s) return true;
  return false;
}

// Source rows of canonical rows 0..rows-1. llama.cpp's converter reorders the
// rows of each head of q_proj / k_proj from HF's half-split rotary layout to
// interleaved pairs (GGUF row 2b + a of a head = HF row a * D/2 + b); the
// inverse is applied for arch llama.
std::vector<int64_t> row_order(const WeightSource& w, const ModelConfig& cfg,
                               const std::string& fname) {
  if (w.shape.size() < 2) return {0};  // a vector is one row
  std::vector<int64_t> order(static_cast<size_t>(w.shape[0]));
  for (int64_t i = 0; i < w.shape[0]; ++i) order[static_cast<size_t>(i)] = w.row_begin + i;
  const bool q = has_suffix(w.canonical, "." HALO_WEIGHT_Q_PROJ),
             k = has_suffix(w.canonical, "." HALO_WEIGHT_K_PROJ);
  if (cfg.model_type != "llama" || !(q || k)) return order;
  const int64_t d = cfg.spec.head_dim;
  if (d % 2 != 0)
    throw Error(fmt::format("{}: head_dim {} is odd: cannot undo the rotary row permutation of {}",
                            fname, d, w.canonical));
  for (int64_t i = 0; i < w.shape[0]; ++i) {
    const int64_t head = i / d, a = (i % d) / (d / 2), b = (i % d) % (d / 2);
    order[static_cast<size_t>(i)] = w.row_begin + head * d + 2 * b + a;
  }
  return order;
}

DLDataType plain_dtype(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF16:
      return {kDLFloat, 16, 1};
    case GgmlType::kBF16:
      return {kDLBfloat, 16, 1};
    default:
      return {kDLFloat, 32, 1};
  }
}

bool contiguous(const std::vector<int64_t>& order) {
  for (size_t i = 1; i < order.size(); ++i)
    if (order[i] != order[i - 1] + 1) return false;
  return true;
}

// A plain tensor's rows `order`: a view into the mapping when they are
// consecutive and aligned, else a copy.
TensorView plain_rows(const GgufTensor& t, const std::vector<int64_t>& order,
                      std::vector<int64_t> shape, WeightStore& store) {
  const DLDataType dtype = plain_dtype(t.type);
  const auto row_bytes = static_cast<uint64_t>(ggml_row_bytes(t.type, t.cols()));
  const uint64_t first = order.empty() ? 0 : static_cast<uint64_t>(order.front()) * row_bytes;
  const bool aligned = reinterpret_cast<uintptr_t>(t.data + first) % element_bytes(dtype) == 0;
  if (contiguous(order) && aligned) return TensorView{t.data, first, dtype, std::move(shape)};
  std::byte* copy = store.allocate(order.size() * row_bytes, fmt::format("tensor '{}'", t.name));
  for (size_t r = 0; r < order.size(); ++r)
    std::memcpy(copy + r * row_bytes, t.data + static_cast<uint64_t>(order[r]) * row_bytes,
                row_bytes);
  return TensorView{copy, 0, dtype, std::move(shape)};
}

// A quantized tensor's rows dequantized to a plain fp32 tensor.
TensorView dequantized_rows(const GgufTensor& t, const std::vector<int64_t>& order,
                            std::vector<int64_t> shape, WeightStore& store) {
  const int64_t cols = t.cols();
  const int64_t row_bytes = ggml_row_bytes(t.type, cols);
  auto* out = reinterpret_cast<float*>(
      store.allocate(order.size() * static_cast<size_t>(cols) * sizeof(float),
                     fmt::format("tensor '{}'", t.name)));
  for (size_t r = 0; r < order.size(); ++r)
    ggml_dequantize_row(t.type, t.data + order[r] * row_bytes, cols,
                        out + static_cast<int64_t>(r) * cols);
  return TensorView{out, 0, {kDLFloat, 32, 1}, std::move(shape)};
}

const GgufTensor& checked_tensor(const GgufFile& f, const WeightSource& w,
                                 const std::string& name) {
  const std::string fname = f.path().string();
  const GgufTensor* t = f.find(name);
  if (t == nullptr)
    throw Error(fmt::format("{}: missing tensor '{}' (for {}, expected shape {})", fname, name,
                            w.canonical, shape_str(w.hf_shape)));
  if (t->shape() != w.hf_shape)
    throw Error(fmt::format("{}: tensor '{}' has shape {}, expected {} (for {})", fname, name,
                            shape_str(t->shape()), shape_str(w.hf_shape), w.canonical));
  if (!ggml_is_supported(t->type))
    throw Error(
        fmt::format("{}: tensor '{}' has ggml type {}, which halo cannot load (supported: {})",
                    fname, name, ggml_type_name(t->type), ggml_supported_types()));
  return *t;
}

// One canonical weight from its GGUF tensor.
void add_weight(const GgufFile& f, const WeightSource& w, const ModelConfig& cfg,
                WeightStore& store) {
  const GgufTensor& t = checked_tensor(f, w, gguf_name(w.hf_name));
  const std::vector<int64_t> order = row_order(w, cfg, f.path().string());
  if (ggml_is_plain(t.type)) {
    store.add(w.canonical, plain_rows(t, order, w.shape, store));
  } else if (is_projection(w.canonical)) {
    store.add_quantized(w.canonical,
                        ggml_to_abi(t.type, t.data, t.cols(), order, store,
                                    fmt::format("{}: tensor '{}'", f.path().string(), t.name)));
  } else {
    store.add(w.canonical, dequantized_rows(t, order, w.shape, store));
  }
}

}  // namespace

std::optional<fs::path> find_gguf(const fs::path& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    if (path.extension() == ".gguf") return path;
    return std::nullopt;
  }
  if (!fs::is_directory(path, ec)) return std::nullopt;
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (e.path().extension() == ".gguf" && e.is_regular_file(ec)) found.push_back(e.path());
  if (found.size() == 1) return found.front();
  if (found.size() > 1 && !fs::exists(path / "config.json")) {
    std::sort(found.begin(), found.end());
    std::vector<std::string> names;
    for (const auto& p : found) names.push_back(p.filename().string());
    throw Error(fmt::format("{}: several GGUF files ({}); name the one to load", path.string(),
                            fmt::join(names, ", ")));
  }
  return std::nullopt;
}

ModelConfig gguf_model_config(const GgufFile& file) {
  return parse_model_config(equivalent_config(file), nullptr, file.path().string());
}

void load_gguf_weights(const std::shared_ptr<const GgufFile>& file, ModelConfig& config,
                       WeightStore& store) {
  store.keep(file);
  const GgufFile& f = *file;
  for (const WeightSource& w : expected_weights(config)) add_weight(f, w, config, store);
  // A tied embedding that is quantized: embed_tokens went plain (fp32), the
  // quantized rows serve as lm_head.
  const GgufTensor* embd = f.find("token_embd.weight");
  if (config.tied_embeddings() && embd != nullptr && !ggml_is_plain(embd->type)) {
    std::vector<int64_t> order(static_cast<size_t>(embd->rows()));
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    store.add_quantized(HALO_WEIGHT_LM_HEAD,
                        ggml_to_abi(embd->type, embd->data, embd->cols(), order, store,
                                    fmt::format("{}: tensor '{}'", f.path().string(), embd->name)));
    config.spec.flags &= ~static_cast<uint32_t>(HALO_MODEL_TIED_EMBEDDINGS);
  }
}

}  // namespace halo::model
