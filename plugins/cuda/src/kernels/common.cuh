// Shared vocabulary of the CUDA plugin's kernels.
//
// Every kernel is a struct K with
//   struct Params { ... };   // what the launch passes (plain pointers and sizes)
//   struct Regs { ... };     // per-thread state that lives across barriers
//   HALO_HD static int step(int phase, const Params&, const Ctx&, Regs&);
// step() runs the code of one thread between two barriers and returns the next
// phase (or -1: done). The return value must be the same for every thread of
// a block (as the control flow around __syncthreads must be uniform). On the
// GPU, run_kernel<K> (launch.cu) loops `phase = step(...); __syncthreads();`;
// on the host, emulate<K> (emulate.h) runs every thread of every block phase
// by phase, so the very same code is tested without a GPU.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define HALO_HD __host__ __device__
#else
#define HALO_HD
#endif

namespace halo::cuda::k {

// Position of one thread: block index (x, y, z), thread index within a 1-D
// block, block size and the block's dynamic shared memory (float granules).
struct Dim3 {
  int x = 1, y = 1, z = 1;
};
struct Ctx {
  Dim3 block;
  Dim3 grid;
  int tid = 0;
  int nthreads = 1;
  float* smem = nullptr;
};

// 16-bit storage types, bit-compatible with __nv_bfloat16 / __half (and with
// cuBLAS' CUDA_R_16BF / CUDA_R_16F).
struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

HALO_HD inline float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}
HALO_HD inline uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

HALO_HD inline float to_float(float x) { return x; }
HALO_HD inline float to_float(bf16 x) { return bits_f32(static_cast<uint32_t>(x.bits) << 16); }
HALO_HD inline float to_float(f16 x) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(x.bits));
#else
  const uint32_t sign = static_cast<uint32_t>(x.bits & 0x8000u) << 16;
  const uint32_t exp = (x.bits >> 10) & 0x1fu;
  uint32_t mant = x.bits & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return bits_f32(sign);
    uint32_t e = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    return bits_f32(sign | (e << 23) | ((mant & 0x3ffu) << 13));
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
  return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
#endif
}

template <class T>
struct Convert;
template <>
struct Convert<float> {
  HALO_HD static float from(float f) { return f; }
};
template <>
struct Convert<bf16> {
  HALO_HD static bf16 from(float f) {  // round to nearest even, NaN stays NaN
    const uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((x >> 16) | 0x40u)};
    return bf16{static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16)};
  }
};
template <>
struct Convert<f16> {
  HALO_HD static f16 from(float f) {
#if defined(__CUDA_ARCH__)
    return f16{__half_as_ushort(__float2half_rn(f))};
#else
    uint32_t x = f32_bits(f);
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) return f16{static_cast<uint16_t>(sign | 0x7c00u | (x > 0x7f800000u ? 0x200u : 0u))};
    if (x >= 0x477ff000u) return f16{static_cast<uint16_t>(sign | 0x7c00u)};
    if (x < 0x38800000u) {
      if (x < 0x33000000u) return f16{sign};
      const uint32_t e = x >> 23;
      const uint32_t m = (x & 0x7fffffu) | 0x800000u;
      const uint32_t shift = 126u - e;
      uint32_t h = m >> shift;
      const uint32_t rem = m & ((1u << shift) - 1u);
      const uint32_t half = 1u << (shift - 1u);
      if (rem > half || (rem == half && (h & 1u))) ++h;
      return f16{static_cast<uint16_t>(sign | h)};
    }
    uint32_t h = (x >> 13) - (112u << 10);
    const uint32_t rem = x & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return f16{static_cast<uint16_t>(sign | h)};
#endif
  }
};
template <class T>
HALO_HD inline T from_float(float f) {
  return Convert<T>::from(f);
}

HALO_HD inline float fmax2(float a, float b) { return a > b ? a : b; }
HALO_HD inline int imin(int a, int b) { return a < b ? a : b; }
HALO_HD inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

constexpr int kDone = -1;

}  // namespace halo::cuda::k
