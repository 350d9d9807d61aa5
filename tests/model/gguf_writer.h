#pragma once
// Test-only GGUF writer and ggml block generators: small GGUF files built in
// the tests themselves (valid ones, and malformed ones by editing the fields).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/half.h"
#include "model/ggml_blocks.h"

namespace halo::model::testing {

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
inline void put_str(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

// Value types (gguf_metadata_value_type).
enum : uint32_t { kU8 = 0, kI8, kU16, kI16, kU32, kI32, kF32, kBool, kStr, kArr, kU64, kI64, kF64 };

class GgufWriter {
 public:
  uint32_t version = 3;
  uint64_t alignment = 32;  // where tensors are placed (general.alignment is a key like any other)

  // A key with its already encoded value (type + bytes).
  void kv_raw(const std::string& key, uint32_t type, const std::string& value) {
    put_str(kv_, key);
    put<uint32_t>(kv_, type);
    kv_ += value;
    ++kv_count_;
  }
  template <class T>
  void kv(const std::string& key, uint32_t type, T v) {
    std::string b;
    put<T>(b, v);
    kv_raw(key, type, b);
  }
  void kv_u32(const std::string& key, uint32_t v) { kv(key, kU32, v); }
  void kv_f32(const std::string& key, float v) { kv(key, kF32, v); }
  void kv_string(const std::string& key, const std::string& v) {
    std::string b;
    put_str(b, v);
    kv_raw(key, kStr, b);
  }
  void kv_strings(const std::string& key, const std::vector<std::string>& v) {
    std::string b;
    put<uint32_t>(b, kStr);
    put<uint64_t>(b, v.size());
    for (const auto& s : v) put_str(b, s);
    kv_raw(key, kArr, b);
  }
  template <class T>
  void kv_array(const std::string& key, uint32_t elem_type, const std::vector<T>& v) {
    std::string b;
    put<uint32_t>(b, elem_type);
    put<uint64_t>(b, v.size());
    for (const T& x : v) put<T>(b, x);
    kv_raw(key, kArr, b);
  }

  // dims in GGUF order (dims[0] = row length).
  void tensor(const std::string& name, uint32_t type, std::vector<uint64_t> dims,
              std::string data) {
    tensors_.push_back({name, type, std::move(dims), std::move(data)});
  }

  std::string build() const {
    std::string out = "GGUF";
    put<uint32_t>(out, version);
    put<uint64_t>(out, tensors_.size());
    put<uint64_t>(out, kv_count_);
    out += kv_;
    std::string data;
    for (const auto& t : tensors_) {
      while (data.size() % alignment) data += '\0';
      put_str(out, t.name);
      put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) put<uint64_t>(out, d);
      put<uint32_t>(out, t.type);
      put<uint64_t>(out, data.size());
      data += t.data;
    }
    while (out.size() % alignment) out += '\0';
    return out + data;
  }

  void write(const std::filesystem::path& p) const {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    const std::string b = build();
    f.write(b.data(), static_cast<std::streamsize>(b.size()));
  }

 private:
  struct T {
    std::string name;
    uint32_t type;
    std::vector<uint64_t> dims;
    std::string data;
  };
  std::string kv_;
  uint64_t kv_count_ = 0;
  std::vector<T> tensors_;
};

// A random finite half: normal with exponent in [lo, hi] (biased, 1..30), or
// now and then subnormal.
inline uint16_t random_half(std::mt19937& rng, int lo = 5, int hi = 18) {
  const uint16_t sign = (rng() & 1) ? 0x8000 : 0;
  const uint16_t mant = static_cast<uint16_t>(rng() & 0x3FF);
  if (rng() % 16 == 0) return static_cast<uint16_t>(sign | mant);
  const int exp = lo + static_cast<int>(rng() % static_cast<unsigned>(hi - lo + 1));
  return static_cast<uint16_t>(sign | (exp << 10) | mant);
}

// Offsets of the fp16 fields in a block of a quantized type.
inline std::vector<int> half_fields(GgmlType t) {
  switch (t) {
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
      return {0};
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
      return {0, 2};
    case GgmlType::kQ6_K:
      return {208};
    default:
      return {};
  }
}

// `n` blocks of `t`: random bytes with valid fp16 scales.
inline std::string random_blocks(GgmlType t, int64_t n, std::mt19937& rng, int exp_lo = 5,
                                 int exp_hi = 18) {
  const GgmlBlock blk = *ggml_block(static_cast<uint32_t>(t));
  std::string out(static_cast<size_t>(n * blk.bytes), '\0');
  for (auto& c : out) c = static_cast<char>(rng() & 0xFF);
  for (int64_t b = 0; b < n; ++b)
    for (int off : half_fields(t)) {
      const uint16_t h = random_half(rng, exp_lo, exp_hi);
      std::memcpy(&out[static_cast<size_t>(b * blk.bytes + off)], &h, 2);
    }
  return out;
}

// The smallest half >= x (x >= 0 and finite in half range).
inline uint16_t half_at_least(float x) {
  static const std::vector<std::pair<float, uint16_t>> table = [] {
    std::vector<std::pair<float, uint16_t>> v;
    for (uint32_t h = 0; h < 0x7C00; ++h)
      v.push_back({fp16_to_float(static_cast<uint16_t>(h)), static_cast<uint16_t>(h)});
    return v;
  }();
  auto it = std::lower_bound(table.begin(), table.end(), x,
                             [](const auto& e, float v) { return e.first < v; });
  return it == table.end() ? 0x7BFF : it->second;
}

// One row of floats as Q8_0 blocks (d = the smallest half >= amax / 127).
inline std::string quantize_q8_0(const float* x, int64_t n) {
  std::string out;
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const uint16_t h = half_at_least(amax / 127.0f);
    const float d = fp16_to_float(h);
    put<uint16_t>(out, h);
    for (int j = 0; j < 32; ++j) {
      const float q = d == 0 ? 0.0f : std::round(x[b * 32 + j] / d);
      put<int8_t>(out, static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f)));
    }
  }
  return out;
}

}  // namespace halo::model::testing
