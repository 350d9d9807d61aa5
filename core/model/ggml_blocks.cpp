#include "model/ggml_blocks.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "common/half.h"

namespace halo::model {

namespace {

struct TypeEntry {
  uint32_t type;
  std::string_view name;
  GgmlBlock block;
};

// ggml.h's types with their block geometry (ggml-common.h's block structs).
constexpr TypeEntry kTypes[] = {
    {0, "F32", {1, 4}},         {1, "F16", {1, 2}},         {2, "Q4_0", {32, 18}},
    {3, "Q4_1", {32, 20}},      {6, "Q5_0", {32, 22}},      {7, "Q5_1", {32, 24}},
    {8, "Q8_0", {32, 34}},      {9, "Q8_1", {32, 36}},      {10, "Q2_K", {256, 84}},
    {11, "Q3_K", {256, 110}},   {12, "Q4_K", {256, 144}},   {13, "Q5_K", {256, 176}},
    {14, "Q6_K", {256, 210}},   {15, "Q8_K", {256, 292}},   {16, "IQ2_XXS", {256, 66}},
    {17, "IQ2_XS", {256, 74}},  {18, "IQ3_XXS", {256, 98}}, {19, "IQ1_S", {256, 50}},
    {20, "IQ4_NL", {32, 18}},   {21, "IQ3_S", {256, 110}},  {22, "IQ2_S", {256, 82}},
    {23, "IQ4_XS", {256, 136}}, {24, "I8", {1, 1}},         {25, "I16", {1, 2}},
    {26, "I32", {1, 4}},        {27, "I64", {1, 8}},        {28, "F64", {1, 8}},
    {29, "IQ1_M", {256, 56}},   {30, "BF16", {1, 2}},       {34, "TQ1_0", {256, 54}},
    {35, "TQ2_0", {256, 66}},   {39, "MXFP4", {32, 17}},
};

const TypeEntry* entry(uint32_t type) {
  for (const auto& e : kTypes)
    if (e.type == type) return &e;
  return nullptr;
}

uint16_t load16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
float half_at(const uint8_t* p) { return fp16_to_float(load16(p)); }

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from the 12
// packed bytes: j < 4 in the low 6 bits of bytes j and j + 4; j >= 4 in the
// nibbles of byte j + 4 with their top 2 bits in the top bits of bytes
// j - 4 (scale) and j (min).
void scale_min_k4(int j, const uint8_t* s, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// ------------------------------------------------ dequantization as ggml does

void dequant_q8_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void dequant_q4_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((b[2 + j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
  }
}

// Q4_K (qh == null) and Q5_K: 4 chunks of 64 = two sub-blocks of 32 over
// the same 32 bytes (low nibbles, then high nibbles); Q5_K's fifth bit of
// chunk c is bit 2c (first half) or 2c + 1 (second half) of qh[l].
void dequant_k4(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, float* y) {
  const float d = half_at(b);
  const float dmin = half_at(b + 2);
  for (int c = 0; c < 4; ++c) {
    for (int half = 0; half < 2; ++half) {
      int sc = 0, m = 0;
      scale_min_k4(2 * c + half, b + 4, sc, m);
      const float d1 = d * static_cast<float>(sc);
      const float m1 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) {
        int q = half == 0 ? (qs[32 * c + l] & 0xF) : (qs[32 * c + l] >> 4);
        if (qh != nullptr) q += ((qh[l] >> (2 * c + half)) & 1) << 4;
        y[64 * c + 32 * half + l] = d1 * static_cast<float>(q) - m1;
      }
    }
  }
}

void dequant_q4_k(const uint8_t* b, float* y) { dequant_k4(b, nullptr, b + 16, y); }
void dequant_q5_k(const uint8_t* b, float* y) { dequant_k4(b, b + 16, b + 48, y); }

// Q6_K element e = 128 h + 32 k + l (h 0..1, k 0..3, l 0..31): low nibble of
// ql[64 h + l + 32 (k & 1)] (high nibble when k >= 2), top two bits at bit 2k
// of qh[32 h + l]; its scale is scales[e / 16].
int q6_value(const uint8_t* b, int e) {
  const int h = e / 128, k = (e / 32) % 4, l = e % 32;
  const uint8_t lo = b[64 * h + l + 32 * (k & 1)];
  const int low = k >= 2 ? (lo >> 4) : (lo & 0xF);
  const int high = (b[128 + 32 * h + l] >> (2 * k)) & 3;
  return (low | (high << 4)) - 32;
}

void dequant_q6_k(const uint8_t* b, float* y) {
  const float d = half_at(b + 208);
  for (int e = 0; e < 256; ++e) {
    const float sc = static_cast<float>(static_cast<int8_t>(b[192 + e / 16]));
    y[e] = d * sc * static_cast<float>(q6_value(b, e));
  }
}

// --------------------------------------------- decoding into the ABI layout

// One block as q values in element order plus per-group scale and offset.
using BlockDecoder = void (*)(const uint8_t* b, int8_t* q, float* scales, float* offsets);

void decode_q8_0(const uint8_t* b, int8_t* q, float* scales, float*) {
  std::memcpy(q, b + 2, 32);
  scales[0] = half_at(b);
}

void decode_q4_0(const uint8_t* b, int8_t* q, float* scales, float* offsets) {
  for (int j = 0; j < 16; ++j) {
    q[j] = static_cast<int8_t>(b[2 + j] & 0xF);
    q[j + 16] = static_cast<int8_t>(b[2 + j] >> 4);
  }
  scales[0] = half_at(b);
  offsets[0] = -8.0f * scales[0];
}

void decode_k4(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, int8_t* q, float* scales,
               float* offsets) {
  const float d = half_at(b);
  const float dmin = half_at(b + 2);
  for (int s = 0; s < 8; ++s) {
    int sc = 0, m = 0;
    scale_min_k4(s, b + 4, sc, m);
    scales[s] = d * static_cast<float>(sc);
    offsets[s] = -(dmin * static_cast<float>(m));
  }
  for (int e = 0; e < 256; ++e) {
    const int c = e / 64, half = (e / 32) % 2, l = e % 32;
    int v = half == 0 ? (qs[32 * c + l] & 0xF) : (qs[32 * c + l] >> 4);
    if (qh != nullptr) v += ((qh[l] >> (2 * c + half)) & 1) << 4;
    q[e] = static_cast<int8_t>(v);
  }
}

void decode_q4_k(const uint8_t* b, int8_t* q, float* scales, float* offsets) {
  decode_k4(b, nullptr, b + 16, q, scales, offsets);
}
void decode_q5_k(const uint8_t* b, int8_t* q, float* scales, float* offsets) {
  decode_k4(b, b + 16, b + 48, q, scales, offsets);
}

void decode_q6_k(const uint8_t* b, int8_t* q, float* scales, float*) {
  const float d = half_at(b + 208);
  for (int s = 0; s < 16; ++s) scales[s] = d * static_cast<float>(static_cast<int8_t>(b[192 + s]));
  for (int e = 0; e < 256; ++e) q[e] = static_cast<int8_t>(q6_value(b, e));
}

// How a quantized ggml type maps to the ABI.
struct AbiMapping {
  GgmlType type;
  int32_t quant;     // halo_quant_type
  int32_t group;     // group_size
  bool offsets;      // has offsets
  bool prefer_fp16;  // fp16 scales/offsets when every value is exact in fp16
  BlockDecoder decode;
};

constexpr AbiMapping kMappings[] = {
    {GgmlType::kQ8_0, HALO_QUANT_INT8, 32, false, true, decode_q8_0},
    {GgmlType::kQ4_0, HALO_QUANT_UINT4, 32, true, true, decode_q4_0},
    {GgmlType::kQ4_K, HALO_QUANT_UINT4, 32, true, false, decode_q4_k},
    {GgmlType::kQ5_K, HALO_QUANT_INT8, 32, true, false, decode_q5_k},
    {GgmlType::kQ6_K, HALO_QUANT_INT8, 16, false, false, decode_q6_k},
};

const AbiMapping* mapping(uint32_t type) {
  for (const auto& m : kMappings)
    if (static_cast<uint32_t>(m.type) == type) return &m;
  return nullptr;
}

// Half bits of `f` when f is exactly a half (finite), else nothing.
std::optional<uint16_t> exact_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const int exp = static_cast<int>((x >> 23) & 0xFF) - 127;
  const uint32_t mant = x & 0x7FFFFFu;
  uint16_t h = sign;
  if ((x & 0x7FFFFFFFu) == 0) {
    h = sign;
  } else if (exp > 15 || exp < -24) {
    return std::nullopt;
  } else if (exp >= -14) {
    h = static_cast<uint16_t>(sign | ((exp + 15) << 10) | (mant >> 13));
  } else {
    h = static_cast<uint16_t>(sign | ((0x800000u | mant) >> (-1 - exp)));
  }
  if (std::bit_cast<uint32_t>(fp16_to_float(h)) != x) return std::nullopt;
  return h;
}

// Scales (and offsets) in their final dtype, memory from the store.
const void* emit_scales(const std::vector<float>& v, bool fp16, WeightStore& store,
                        std::string_view what) {
  if (!fp16) {
    std::byte* out = store.allocate(v.size() * sizeof(float), what);
    std::memcpy(out, v.data(), v.size() * sizeof(float));
    return out;
  }
  auto* out = reinterpret_cast<uint16_t*>(store.allocate(v.size() * sizeof(uint16_t), what));
  for (size_t i = 0; i < v.size(); ++i) out[i] = *exact_fp16(v[i]);
  return out;
}

bool all_fp16(const std::vector<float>& v) {
  for (float f : v)
    if (!exact_fp16(f)) return false;
  return true;
}

// q values of one row (element order) into the row's ABI bytes.
void emit_values(const int8_t* q, int64_t cols, int32_t quant, std::byte* out) {
  if (quant == HALO_QUANT_INT8) {
    std::memcpy(out, q, static_cast<size_t>(cols));
    return;
  }
  for (int64_t j = 0; j < cols / 2; ++j)
    out[j] = static_cast<std::byte>((q[2 * j] & 0xF) | ((q[2 * j + 1] & 0xF) << 4));
}

}  // namespace


std::optional<GgmlBlock> ggml_block(uint32_t type) {
  const TypeEntry* e = entry(type);
  if (e == nullptr) return std::nullopt;
  return e->block;
}

std::string ggml_type_name(uint32_t type) {
  const TypeEntry* e = entry(type);
  return e != nullptr ? std::string(e->name) : fmt::format("type {}", type);
}

bool ggml_is_plain(uint32_t type) {
  return type == static_cast<uint32_t>(GgmlType::kF32) ||
         type == static_cast<uint32_t>(GgmlType::kF16) ||
         type == static_cast<uint32_t>(GgmlType::kBF16);
}

bool ggml_is_supported(uint32_t type) { return ggml_is_plain(type) || mapping(type) != nullptr; }

std::string_view ggml_supported_types() { return "F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K"; }

int64_t ggml_row_bytes(uint32_t type, int64_t cols) {
  const TypeEntry* e = entry(type);
  if (e == nullptr) return 0;
  return cols / e->block.elems * e->block.bytes;
}

void ggml_dequantize_row(uint32_t type, const std::byte* row, int64_t cols, float* out) {
  const auto* b = reinterpret_cast<const uint8_t*>(row);
  using Fn = void (*)(const uint8_t*, float*);
  Fn fn = nullptr;
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      std::memcpy(out, row, static_cast<size_t>(cols) * 4);
      return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < cols; ++i) out[i] = fp16_to_float(load16(b + 2 * i));
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < cols; ++i) out[i] = bf16_to_float(load16(b + 2 * i));
      return;
    case GgmlType::kQ8_0:
      fn = dequant_q8_0;
      break;
    case GgmlType::kQ4_0:
      fn = dequant_q4_0;
      break;
    case GgmlType::kQ4_K:
      fn = dequant_q4_k;
      break;
    case GgmlType::kQ5_K:
      fn = dequant_q5_k;
      break;
    case GgmlType::kQ6_K:
      fn = dequant_q6_k;
      break;
  }
  if (fn == nullptr)
    throw Error(fmt::format("cannot dequantize ggml type {} (supported: {})", ggml_type_name(type),
                            ggml_supported_types()));
  const GgmlBlock blk = entry(type)->block;
  for (int64_t i = 0; i < cols / blk.elems; ++i) fn(b + i * blk.bytes, out + i * blk.elems);
}

QuantizedView ggml_to_abi(uint32_t type, const std::byte* data, int64_t cols,
                          std::span<const int64_t> row_order, WeightStore& store,
                          std::string_view what) {
  const AbiMapping* m = mapping(type);
  if (m == nullptr)
    throw Error(fmt::format(
        "{}: ggml type {} has no quantized ABI layout (quantized types supported: Q8_0, Q4_0, "
        "Q4_K, Q5_K, Q6_K)",
        what, ggml_type_name(type)));
  const GgmlBlock blk = entry(type)->block;
  if (cols <= 0 || cols % blk.elems != 0)
    throw Error(fmt::format("{}: row length {} is not a multiple of {}'s block of {}", what, cols,
                            ggml_type_name(type), blk.elems));
  const auto rows = static_cast<int64_t>(row_order.size());
  const int64_t row_bytes = cols / blk.elems * blk.bytes;
  const int64_t value_row = m->quant == HALO_QUANT_UINT4 ? cols / 2 : cols;
  const int64_t groups = cols / m->group, groups_per_block = blk.elems / m->group;
  std::byte* values = store.allocate(static_cast<size_t>(rows * value_row), what);
  std::vector<float> scales(static_cast<size_t>(rows * groups)),
      offsets(m->offsets ? scales.size() : 0);
  std::vector<int8_t> q(static_cast<size_t>(cols));
  float unused[16];
  for (int64_t r = 0; r < rows; ++r) {
    const auto* src =
        reinterpret_cast<const uint8_t*>(data) + row_order[static_cast<size_t>(r)] * row_bytes;
    for (int64_t b = 0; b < cols / blk.elems; ++b) {
      const size_t g = static_cast<size_t>(r * groups + b * groups_per_block);
      m->decode(src + b * blk.bytes, q.data() + b * blk.elems, scales.data() + g,
                m->offsets ? offsets.data() + g : unused);
    }
    emit_values(q.data(), cols, m->quant, values + r * value_row);
  }
  const bool fp16 = m->prefer_fp16 && all_fp16(scales) && all_fp16(offsets);
  QuantizedView v;
  v.type = m->quant;
  v.group_size = m->group;
  v.rows = rows;
  v.cols = cols;
  v.values = values;
  v.scale_dtype = fp16 ? DLDataType{kDLFloat, 16, 1} : DLDataType{kDLFloat, 32, 1};
  v.scales = emit_scales(scales, fp16, store, what);
  v.offsets = m->offsets ? emit_scales(offsets, fp16, store, what) : nullptr;
  return v;
}

void abi_dequantize_row(const QuantizedView& q, int64_t row, float* out) {
  const int64_t groups = q.cols / q.group_size;
  const auto* values = static_cast<const uint8_t*>(q.values);
  for (int64_t k = 0; k < q.cols; ++k) {
    int v = 0;
    if (q.type == HALO_QUANT_INT8) {
      v = static_cast<int8_t>(values[row * q.cols + k]);
    } else {
      const uint8_t byte = values[row * (q.cols / 2) + k / 2];
      v = (k % 2 == 0) ? (byte & 0xF) : (byte >> 4);
    }
    const int64_t g = row * groups + k / q.group_size;
    const float offset = q.offsets != nullptr ? float_element(q.offsets, q.scale_dtype, g) : 0.0f;
    out[k] = float_element(q.scales, q.scale_dtype, g) * static_cast<float>(v) + offset;
  }
}

}  // namespace halo::model
