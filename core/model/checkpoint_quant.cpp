#include "model/checkpoint_quant.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/error.h"
#include "common/half.h"

namespace halo::model {

using nlohmann::json;

namespace {

// compressed-tensors: the weights' arguments of the (first) config group.
void parse_compressed_tensors(const json& qc, CheckpointQuantization& q) {
  q.method = CheckpointQuantization::Method::kCompressedTensors;
  q.format = qc.value("format", "");
  if (q.format != "pack-quantized" && q.format != "int-quantized" && q.format != "naive-quantized")
    throw Error(
        fmt::format("{}: quantization_config.format \"{}\" is not one halo loads (pack-quantized, "
                    "int-quantized, naive-quantized)",
                    q.source, q.format));
  const json* groups = qc.contains("config_groups") ? &qc["config_groups"] : nullptr;
  if (!groups || !groups->is_object() || groups->empty())
    throw Error(fmt::format("{}: quantization_config has no config_groups", q.source));
  if (groups->size() > 1)
    throw Error(fmt::format(
        "{}: quantization_config has {} config_groups; halo loads checkpoints with one scheme",
        q.source, groups->size()));
  const json& w = groups->begin().value().value("weights", json::object());
  q.bits = w.value("num_bits", 0);
  q.symmetric = w.value("symmetric", true);
  const std::string type = w.value("type", "int"), strategy = w.value("strategy", "channel");
  if (type != "int")
    throw Error(fmt::format("{}: weights of type \"{}\" (halo loads int)", q.source, type));
  if (strategy == "group")
    q.group_size = w.value("group_size", 0);
  else if (strategy == "channel" || strategy == "tensor")
    q.group_size = -1;
  else
    throw Error(fmt::format("{}: weight strategy \"{}\" (halo loads group, channel, tensor)",
                            q.source, strategy));
  if (w.value("actorder", json()).is_string())
    throw Error(fmt::format("{}: activation ordering (actorder) is not supported", q.source));
  const bool packed = q.format == "pack-quantized";
  if ((packed && q.bits != 4) || (!packed && q.bits != 8))
    throw Error(
        fmt::format("{}: {}-bit weights in format {} (halo loads 4-bit pack-quantized and 8-bit "
                    "int-quantized)",
                    q.source, q.bits, q.format));
}

void parse_gptq(const json& qc, CheckpointQuantization& q) {
  q.method = CheckpointQuantization::Method::kGptq;
  q.bits = qc.value("bits", 0);
  q.group_size = qc.value("group_size", -1);
  q.symmetric = qc.value("sym", true);
  const std::string fmt_name = qc.value("checkpoint_format", "gptq");
  q.gptq_v1_zeros = fmt_name != "gptq_v2";
  if (q.bits != 4 && q.bits != 8)
    throw Error(fmt::format("{}: GPTQ with {} bits (halo loads 4 and 8)", q.source, q.bits));
  if (qc.value("desc_act", false))
    throw Error(fmt::format(
        "{}: GPTQ with desc_act true (activation order) is not supported; use a desc_act "
        "false checkpoint",
        q.source));
}

}  // namespace

CheckpointQuantization parse_checkpoint_quantization(const json& config,
                                                     const std::string& source) {
  CheckpointQuantization q;
  q.source = source;
  if (!config.is_object() || !config.contains("quantization_config")) return q;
  const json& qc = config["quantization_config"];
  if (!qc.is_object()) throw Error(fmt::format("{}: quantization_config is not an object", source));
  const std::string method = qc.value("quant_method", "");
  if (method == "gptq")
    parse_gptq(qc, q);
  else if (method == "compressed-tensors")
    parse_compressed_tensors(qc, q);
  else
    throw Error(
        fmt::format("{}: quantization_config.quant_method \"{}\" is not one halo loads (gptq, "
                    "compressed-tensors; GGUF files load directly)",
                    source, method));
  return q;
}

namespace {

int64_t numel(const TensorInfo& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n;
}

float float_at(const FoundTensor& t, int64_t i) {
  switch (t.info->dtype) {
    case SafetensorsDType::kF32: {
      float f;
      std::memcpy(&f, t.data + i * 4, 4);
      return f;
    }
    case SafetensorsDType::kF16:
    case SafetensorsDType::kBF16: {
      uint16_t h;
      std::memcpy(&h, t.data + i * 2, 2);
      return t.info->dtype == SafetensorsDType::kF16 ? fp16_to_float(h) : bf16_to_float(h);
    }
    default:
      break;
  }
  throw Error(fmt::format("{}: tensor '{}' has dtype {}; scales must be F32, F16 or BF16",
                          t.file->path().string(), t.info->name, dtype_name(t.info->dtype)));
}

uint32_t u32_at(const FoundTensor& t, int64_t i) {
  uint32_t v;
  std::memcpy(&v, t.data + i * 4, 4);
  return v;
}

// The tensor `name`, checked to exist with this dtype and shape.
FoundTensor need(const TensorLookup& find, const std::string& name,
                 std::initializer_list<SafetensorsDType> dtypes, const std::vector<int64_t>& shape,
                 const WeightSource& w) {
  FoundTensor t = find(name);
  if (!t.info)
    throw Error(
        fmt::format("quantized checkpoint: missing tensor '{}' (for {})", name, w.canonical));
  bool ok = false;
  for (auto d : dtypes) ok = ok || t.info->dtype == d;
  if (!ok)
    throw Error(fmt::format("{}: tensor '{}' has dtype {}, not what its quantization format stores",
                            t.file->path().string(), name, dtype_name(t.info->dtype)));
  if (!shape.empty() && t.info->shape != shape)
    throw Error(fmt::format("{}: tensor '{}' has shape [{}], expected [{}] (for {})",
                            t.file->path().string(), name, fmt::join(t.info->shape, ", "),
                            fmt::join(shape, ", "), w.canonical));
  return t;
}

constexpr auto kFloats = {SafetensorsDType::kF32, SafetensorsDType::kF16, SafetensorsDType::kBF16};

// g_idx, when present, must be the trivial k / group (no activation order).
void check_g_idx(const TensorLookup& find, const std::string& name, int64_t in, int64_t group,
                 const WeightSource& w) {
  FoundTensor g = find(name);
  if (!g.info) return;
  need(find, name, {SafetensorsDType::kI32}, {in}, w);
  for (int64_t k = 0; k < in; ++k)
    if (static_cast<int64_t>(u32_at(g, k)) != k / group)
      throw Error(
          fmt::format("{}: tensor '{}' reorders the input groups (activation order); halo loads "
                      "checkpoints without it",
                      g.file->path().string(), name));
}

int64_t group_of(const CheckpointQuantization& q, int64_t in, const WeightSource& w) {
  const int64_t g = q.group_size > 0 ? q.group_size : in;
  if (in % g != 0 || g % 16 != 0)
    throw Error(fmt::format(
        "{}: group size {} for {} with {} inputs (must divide them and be a multiple of 16)",
        q.source, g, w.canonical, in));
  return g;
}

struct Buffers {
  float* scales;
  float* offsets;
};
Buffers float_pair(WeightStore& store, int64_t n, const std::string& what) {
  return {reinterpret_cast<float*>(store.allocate(static_cast<size_t>(n) * 4, what)),
          reinterpret_cast<float*>(store.allocate(static_cast<size_t>(n) * 4, what))};
}

void load_gptq(const CheckpointQuantization& q, const WeightSource& w, const std::string& base,
               const TensorLookup& find, WeightStore& store) {
  const int64_t out = w.shape[0], in = w.shape[1], g = group_of(q, in, w), groups = in / g;
  const int64_t per_word = 32 / q.bits;
  if (in % per_word != 0 || out % per_word != 0)
    throw Error(fmt::format("{}: {} has shape [{}, {}], not a multiple of {} for packed GPTQ",
                            q.source, w.canonical, out, in, per_word));
  const FoundTensor qw =
      need(find, base + ".qweight", {SafetensorsDType::kI32}, {in / per_word, out}, w);
  const FoundTensor qz =
      need(find, base + ".qzeros", {SafetensorsDType::kI32}, {groups, out / per_word}, w);
  const FoundTensor sc = need(find, base + ".scales", kFloats, {groups, out}, w);
  check_g_idx(find, base + ".g_idx", in, g, w);
  const uint32_t mask = (1u << q.bits) - 1;
  const bool four = q.bits == 4;
  auto* values = reinterpret_cast<uint8_t*>(
      store.allocate(static_cast<size_t>(four ? out * in / 2 : out * in), w.canonical));
  const Buffers b = float_pair(store, out * groups, w.canonical);
  const int zero_bias = q.gptq_v1_zeros ? 1 : 0,
            center = four ? 0 : 128;  // 8-bit values become int8 (q - 128)
  for (int64_t n = 0; n < out; ++n) {
    for (int64_t k = 0; k < in; ++k) {
      const uint32_t u = (u32_at(qw, (k / per_word) * out + n) >> (q.bits * (k % per_word))) & mask;
      const int64_t e = n * in + k;
      if (four)
        values[e / 2] = static_cast<uint8_t>(values[e / 2] | (e % 2 ? u << 4 : u));
      else
        values[e] = static_cast<uint8_t>(static_cast<int8_t>(static_cast<int>(u) - center));
    }
    for (int64_t j = 0; j < groups; ++j) {
      const uint32_t z =
          (u32_at(qz, j * (out / per_word) + n / per_word) >> (q.bits * (n % per_word))) & mask;
      const float s = float_at(sc, j * out + n);
      b.scales[n * groups + j] = s;
      b.offsets[n * groups + j] = -s * static_cast<float>(static_cast<int>(z) + zero_bias - center);
    }
  }
  store.add_quantized(w.canonical, QuantizedView{four ? HALO_QUANT_UINT4 : HALO_QUANT_INT8,
                                                 static_cast<int32_t>(g), out, in, values, b.scales,
                                                 b.offsets, DLDataType{kDLFloat, 32, 1}});
}

// Scales [out, groups] from a [out, groups], [out, 1] or scalar tensor.
void expand_scales(const FoundTensor& sc, int64_t out, int64_t groups, float* dst,
                   const WeightSource& w) {
  const int64_t n = numel(*sc.info);
  if (n != out * groups && n != out && n != 1)
    throw Error(fmt::format("{}: tensor '{}' has {} scales; {} has {} rows of {} groups",
                            sc.file->path().string(), sc.info->name, n, w.canonical, out, groups));
  for (int64_t r = 0; r < out; ++r)
    for (int64_t j = 0; j < groups; ++j)
      dst[r * groups + j] = float_at(sc, n == 1 ? 0 : n == out ? r : r * groups + j);
}

void load_packed(const CheckpointQuantization& q, const WeightSource& w, const std::string& base,
                 const TensorLookup& find, WeightStore& store) {
  const int64_t out = w.shape[0], in = w.shape[1], g = group_of(q, in, w), groups = in / g;
  if (in % 8 != 0)
    throw Error(
        fmt::format("{}: {} has {} inputs, not a multiple of 8", q.source, w.canonical, in));
  const FoundTensor packed =
      need(find, base + ".weight_packed", {SafetensorsDType::kI32}, {out, in / 8}, w);
  const FoundTensor sc = need(find, base + ".weight_scale", kFloats, {}, w);
  check_g_idx(find, base + ".weight_g_idx", in, g, w);
  const Buffers b = float_pair(store, out * groups, w.canonical);
  expand_scales(sc, out, groups, b.scales, w);
  const FoundTensor zp = find(base + ".weight_zero_point");
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t j = 0; j < groups; ++j) {
      // Stored values are q + 8; the zero point too (packed 8 rows per int32).
      uint32_t z = 8;
      if (zp.info && !q.symmetric) z = (u32_at(zp, (r / 8) * groups + j) >> (4 * (r % 8))) & 15u;
      b.offsets[r * groups + j] = -b.scales[r * groups + j] * static_cast<float>(z);
    }
  }
  // int32 words of 8 nibbles, little-endian: byte m holds elements 2m and 2m+1, low nibble first.
  store.add_quantized(w.canonical,
                      QuantizedView{HALO_QUANT_UINT4, static_cast<int32_t>(g), out, in, packed.data,
                                    b.scales, b.offsets, DLDataType{kDLFloat, 32, 1}});
}

void load_int8(const CheckpointQuantization& q, const WeightSource& w, const FoundTensor& weight,
               const std::string& base, const TensorLookup& find, WeightStore& store) {
  const int64_t out = w.shape[0], in = w.shape[1], g = group_of(q, in, w), groups = in / g;
  need(find, base + ".weight", {SafetensorsDType::kI8}, {out, in}, w);
  const FoundTensor sc = need(find, base + ".weight_scale", kFloats, {}, w);
  const Buffers b = float_pair(store, out * groups, w.canonical);
  expand_scales(sc, out, groups, b.scales, w);
  const FoundTensor zp = find(base + ".weight_zero_point");
  const bool asym = zp.info && !q.symmetric;
  if (asym) need(find, base + ".weight_zero_point", {SafetensorsDType::kI8}, {}, w);
  for (int64_t i = 0; i < out * groups; ++i)
    b.offsets[i] =
        asym ? -b.scales[i] * static_cast<float>(static_cast<int8_t>(
                                  zp.data[numel(*zp.info) == out * groups ? i : i / groups]))
             : 0.f;
  store.add_quantized(w.canonical, QuantizedView{HALO_QUANT_INT8, static_cast<int32_t>(g), out, in,
                                                 weight.data, b.scales, asym ? b.offsets : nullptr,
                                                 DLDataType{kDLFloat, 32, 1}});
}

}  // namespace

bool load_quantized_projection(const CheckpointQuantization& q, const WeightSource& w,
                               const TensorLookup& find, WeightStore& store) {
  if (q.method == CheckpointQuantization::Method::kNone || !is_projection_weight(w.canonical))
    return false;
  const std::string suffix = ".weight";
  if (!w.hf_name.ends_with(suffix)) return false;
  const std::string base = w.hf_name.substr(0, w.hf_name.size() - suffix.size());
  const bool fused = w.row_begin != 0 || w.shape != w.hf_shape;
  auto refuse_fused = [&] {
    if (fused)
      throw Error(fmt::format(
          "{}: {} is a slice of the fused tensor '{}'; quantized fused projections (Phi-3) are "
          "not supported",
          q.source, w.canonical, w.hf_name));
  };
  if (q.method == CheckpointQuantization::Method::kGptq) {
    if (!find(base + ".qweight").info) return false;  // kept in full precision (e.g. lm_head)
    refuse_fused();
    load_gptq(q, w, base, find, store);
    return true;
  }
  if (q.format == "pack-quantized") {
    if (!find(base + ".weight_packed").info) return false;
    refuse_fused();
    load_packed(q, w, base, find, store);
    return true;
  }
  const FoundTensor weight = find(w.hf_name);
  if (!weight.info || weight.info->dtype != SafetensorsDType::kI8) return false;
  refuse_fused();
  load_int8(q, w, weight, base, find, store);
  return true;
}

}  // namespace halo::model
