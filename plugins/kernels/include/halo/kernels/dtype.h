// Element types of weights and conversions to fp32 (exact) and back (round to
// nearest even). Portable bit manipulation; no dependency on F16C.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace halo::kernels {

enum class DType : uint8_t { F32 = 0, BF16 = 1, F16 = 2 };

constexpr size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }
const char* dtype_name(DType t);

inline float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bf16_to_f32(uint16_t h) { return bits_to_f32(static_cast<uint32_t>(h) << 16); }
uint16_t f32_to_bf16(float f);  // round to nearest even, NaN stays NaN
float f16_to_f32(uint16_t h);   // exact, handles subnormals, inf, NaN
// Whether the CPU has F16C (CPUID leaf 1, ECX bit 29; clang 16's
// __builtin_cpu_supports does not know the name). False off x86-64.
bool cpu_has_f16c();
uint16_t f32_to_f16(float f);   // round to nearest even, overflow -> inf

// dst[i] = float(src[i]) for n elements of type t.
void to_f32(const void* src, DType t, float* dst, size_t n);

}  // namespace halo::kernels
