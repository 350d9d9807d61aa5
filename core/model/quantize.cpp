#include "model/quantize.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "common/half.h"
#include "model/weight_map.h"

namespace halo::model {

const std::vector<std::string>& quantization_method_names() {
  static const std::vector<std::string> names{"none", "int8", "int4"};
  return names;
}

std::string quantization_methods() {
  return fmt::format("{}", fmt::join(quantization_method_names(), ", "));
}

bool is_quantization_method(std::string_view method) {
  const auto& n = quantization_method_names();
  return std::find(n.begin(), n.end(), method) != n.end();
}

namespace {

// Row r of a plain [rows, cols] weight as fp32.
void read_row(const DLTensor& t, int64_t r, int64_t cols, float* out) {
  const auto* base = static_cast<const std::byte*>(t.data) + t.byte_offset;
  for (int64_t i = 0; i < cols; ++i) out[i] = float_element(base, t.dtype, r * cols + i);
}

// int8, one fp32 scale per row: q = round(w / s), s = max|w| / 127.
void quantize_int8(WeightStore& store, const std::string& name, const DLTensor& t) {
  const int64_t rows = t.shape[0], cols = t.shape[1];
  auto* q = reinterpret_cast<int8_t*>(store.allocate(static_cast<size_t>(rows * cols), name));
  auto* s = reinterpret_cast<float*>(store.allocate(static_cast<size_t>(rows) * 4, name));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    read_row(t, r, cols, row.data());
    float amax = 0.f;
    for (float v : row) amax = std::max(amax, std::fabs(v));
    const float scale = amax / 127.f;
    const float inv = scale > 0.f ? 1.f / scale : 0.f;
    for (int64_t c = 0; c < cols; ++c)
      q[r * cols + c] = static_cast<int8_t>(
          std::clamp(std::nearbyint(row[static_cast<size_t>(c)] * inv), -127.f, 127.f));
    s[r] = scale;
  }
  store.add_quantized(name, QuantizedView{HALO_QUANT_INT8, static_cast<int32_t>(cols), rows, cols,
                                          q, s, nullptr, DLDataType{kDLFloat, 32, 1}});
}

// uint4, per group of g inputs an fp16 scale and offset spanning [min, max]:
// w ~ s * q + o with q in 0..15. q is chosen against the rounded s and o.
void quantize_int4(WeightStore& store, const std::string& name, const DLTensor& t, int64_t g) {
  const int64_t rows = t.shape[0], cols = t.shape[1], groups = cols / g;
  auto* q = reinterpret_cast<uint8_t*>(store.allocate(static_cast<size_t>(rows * cols / 2), name));
  auto* s =
      reinterpret_cast<uint16_t*>(store.allocate(static_cast<size_t>(rows * groups) * 2, name));
  auto* o =
      reinterpret_cast<uint16_t*>(store.allocate(static_cast<size_t>(rows * groups) * 2, name));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    read_row(t, r, cols, row.data());
    for (int64_t b = 0; b < groups; ++b) {
      const float* w = row.data() + b * g;
      const auto [lo, hi] = std::minmax_element(w, w + g);
      const uint16_t s16 = float_to_fp16((*hi - *lo) / 15.f), o16 = float_to_fp16(*lo);
      const float sc = fp16_to_float(s16), off = fp16_to_float(o16);
      const float inv = sc > 0.f ? 1.f / sc : 0.f;
      s[r * groups + b] = s16;
      o[r * groups + b] = o16;
      for (int64_t i = 0; i < g; ++i) {
        const auto v =
            static_cast<uint8_t>(std::clamp(std::nearbyint((w[i] - off) * inv), 0.f, 15.f));
        const int64_t e = r * cols + b * g + i;  // element index: byte e/2, low nibble when even
        q[e / 2] = static_cast<uint8_t>(q[e / 2] | (e % 2 ? v << 4 : v));
      }
    }
  }
  store.add_quantized(name, QuantizedView{HALO_QUANT_UINT4, static_cast<int32_t>(g), rows, cols, q,
                                          s, o, DLDataType{kDLFloat, 16, 1}});
}

int64_t group_for(const QuantizationOptions& o, int64_t cols, const std::string& name) {
  const int64_t g = o.group_size > 0 ? o.group_size : (o.method == "int8" ? cols : 32);
  if (g % 16 != 0 || cols % g != 0)
    throw Error(fmt::format(
        "--quantization {} with group size {}: weight '{}' has {} input columns; the group "
        "size must be a multiple of 16 that divides them",
        o.method, g, name, cols));
  if (o.method == "int8" && g != cols)
    throw Error("--quantization int8 is per output channel; group sizes are for int4");
  return g;
}

}  // namespace

void quantize_weights(WeightStore& store, halo_model_spec& spec,
                      const QuantizationOptions& options) {
  if (options.method == "none" || options.method.empty()) return;
  if (!is_quantization_method(options.method))
    throw Error(fmt::format("--quantization {}: unknown method; choose one of {}", options.method,
                            quantization_methods()));
  if (!store.quantized().empty())
    throw Error(
        fmt::format("--quantization {}: the model's weights are already quantized ({} tensors)",
                    options.method, store.quantized().size()));
  if (spec.flags &
      HALO_MODEL_TIED_EMBEDDINGS) {  // lm_head gets its own (quantized) copy of embed_tokens
    const DLTensor* e = store.find(HALO_WEIGHT_EMBED_TOKENS);
    if (e == nullptr)
      throw Error("--quantization: the model has no embed_tokens to untie lm_head from");
    store.add(HALO_WEIGHT_LM_HEAD, TensorView{e->data, e->byte_offset, e->dtype,
                                              std::vector<int64_t>(e->shape, e->shape + 2)});
    spec.flags &= ~HALO_MODEL_TIED_EMBEDDINGS;
  }
  std::vector<std::string> names;
  for (const halo_named_tensor& w : store.plain())
    if (is_projection_weight(w.name)) names.emplace_back(w.name);
  for (const std::string& name : names) {
    const DLTensor& t = *store.find(name);
    const int64_t g = group_for(options, t.shape[1], name);
    if (options.method == "int8")
      quantize_int8(store, name, t);
    else
      quantize_int4(store, name, t, g);
  }
  spdlog::info("quantized {} projection matrices to {} at load ({} MB of weights now)",
               names.size(), options.method, store.bytes() / 1000000);
}

void quantize_model(LoadedModel& model, const QuantizationOptions& options) {
  if (options.method == "none" || options.method.empty()) return;
  if (model.is_compiled())
    throw Error(fmt::format(
        "--quantization {}: a compiled model directory is quantized when it is compiled "
        "(halo compile --quantization)",
        options.method));
  quantize_weights(model.mutable_store(), model.mutable_config().spec, options);
}

}  // namespace halo::model
