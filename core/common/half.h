#pragma once
// 16-bit floats <-> fp32 in the core (weights read for quantization, GGUF
// scales): exact widening, round-to-nearest-even narrowing. Portable bit
// manipulation, no F16C needed.
#include <cstdint>
#include <cstring>

namespace halo {

inline float bits_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bf16_to_float(uint16_t h) { return bits_as_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return bits_as_float(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp != 0) return bits_as_float(sign | ((exp + 112) << 23) | (man << 13));
  // Subnormal (or zero): man * 2^-24, exact in fp32.
  const float v = static_cast<float>(man) * bits_as_float(0x33800000u);
  return sign ? -v : v;
}

inline uint16_t float_to_fp16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {  // below the smallest normal: round to a multiple of 2^-24
    const float v = bits_as_float(a) * 16777216.0f;  // exact scaling by 2^24
    const uint32_t m = static_cast<uint32_t>(v);
    const float rem = v - static_cast<float>(m);
    const uint32_t r = m + ((rem > 0.5f || (rem == 0.5f && (m & 1u))) ? 1u : 0u);
    return static_cast<uint16_t>(sign | r);
  }
  // Normal: rebias and round the 13 dropped mantissa bits to nearest even.
  const uint32_t t = a - 0x38000000u;
  const uint32_t r = (t + 0xfffu + ((t >> 13) & 1u)) >> 13;
  return static_cast<uint16_t>(sign | r);
}

}  // namespace halo
