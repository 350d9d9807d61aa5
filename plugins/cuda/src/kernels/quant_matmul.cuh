// Weight-only quantized matmul: y[M, N] = x[M, K] * W^T with W [N, K] in ABI
// v1.4's layout (device_abi.h, halo_quantized_tensor):
//
//   W[n][k] = scales[n][k / group] * q[n][k] + offsets[n][k / group]
//
// q int8 [N, K] (QINT8) or uint8 nibbles [N, K / 2] (QUINT4: element 2j is
// the low nibble of byte j). Scales and offsets stay in the dtype they came in
// (fp32, fp16 or bf16; offsets nullable). x is the GEMM dtype T, y fp32, every
// product accumulated in fp32; the weights are dequantized in registers (or
// shared memory), never rounded to T. K is a multiple of 16 (the ABI's groups
// are), so an aligned chunk of 8 elements lies in one group.
//
//  - QuantGemvKernel (decode, M <= kQuantGemvMaxM): each block owns 4 output
//    rows, 32 threads per row stride over K in chunks of 8; every weight byte
//    is read once for all M rows of x.
//  - QuantTiledKernel (prefill, any M): 32 x 64 output tiles, K in steps of 32;
//    x and the dequantized W tile go through shared memory, each of the 256
//    threads accumulates a 2 x 4 block in registers.
#pragma once

#include "common.cuh"

// Fully unrolled loops over the GEMV's M rows keep its accumulators in
// registers on the GPU (a runtime bound would put them in local memory).
#if defined(__CUDA_ARCH__)  // the device pass only: the host compiler knows no such pragma
#define HALO_UNROLL _Pragma("unroll")
#else
#define HALO_UNROLL
#endif

namespace halo::cuda::k {

// Same numbers as halo_quant_type.
constexpr int kQuantInt8 = 1;
constexpr int kQuantUint4 = 2;
// Dtype of scales / offsets.
enum ScaleDtype : int { kScaleF32 = 0, kScaleF16 = 1, kScaleBf16 = 2 };

// A quantized matrix [N, K] as the kernels read it.
struct QuantWeight {
  const uint8_t* values = nullptr;  // int8 [N, K] or nibbles [N, K / 2]
  const void* scales = nullptr;     // [N, K / group]
  const void* offsets = nullptr;    // nullable, as scales
  int scale_dtype = kScaleF32;
  int group = 0;
};

HALO_HD inline float load_scale(const void* p, int dtype, size_t i) {
  if (dtype == kScaleF16) return to_float(static_cast<const f16*>(p)[i]);
  if (dtype == kScaleBf16) return to_float(static_cast<const bf16*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

HALO_HD inline uint32_t load_u32(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint32_t*>(
      p);  // 4-byte aligned: rows are K / 2 bytes, K % 16 == 0
#else
  uint32_t u;
  std::memcpy(&u, p, sizeof u);
  return u;
#endif
}

// q[0..8) of row `row` (its first byte) at elements [k, k + 8), k % 8 == 0.
template <int Q>
HALO_HD inline void load_chunk(const uint8_t* row, int k, float q[8]) {
  if (Q == kQuantInt8) {
    const uint32_t lo = load_u32(row + k), hi = load_u32(row + k + 4);
    for (int i = 0; i < 4; ++i) {
      q[i] = static_cast<float>(static_cast<int8_t>((lo >> (8 * i)) & 0xffu));
      q[4 + i] = static_cast<float>(static_cast<int8_t>((hi >> (8 * i)) & 0xffu));
    }
  } else {
    const uint32_t u = load_u32(row + k / 2);
    for (int j = 0; j < 4; ++j) {
      q[2 * j] = static_cast<float>((u >> (8 * j)) & 0xfu);
      q[2 * j + 1] = static_cast<float>((u >> (8 * j + 4)) & 0xfu);
    }
  }
}

template <int Q>
HALO_HD inline size_t quant_row_bytes(int K) {
  return Q == kQuantInt8 ? static_cast<size_t>(K) : static_cast<size_t>(K) / 2;
}

// (scale, offset) of element (n, k).
HALO_HD inline void group_params(const QuantWeight& w, int K, int n, int k, float& s, float& o) {
  const size_t g =
      static_cast<size_t>(n) * static_cast<size_t>(K / w.group) + static_cast<size_t>(k / w.group);
  s = load_scale(w.scales, w.scale_dtype, g);
  o = w.offsets ? load_scale(w.offsets, w.scale_dtype, g) : 0.f;
}

constexpr int kQuantGemvMaxM = 8;

// grid.x = ceil(N / (nthreads / 32)), nthreads a multiple of 32; shared
// memory: kQuantGemvMaxM * nthreads floats.
template <class T, int Q>
struct QuantGemvKernel {
  struct Params {
    const T* x;  // [M, K]
    QuantWeight w;
    float* y;  // [M, N]
    int M, N, K;
  };
  struct Regs {};
  static constexpr size_t smem_floats(int nthreads) {
    return static_cast<size_t>(kQuantGemvMaxM) * nthreads;
  }

  // One thread's partial dot products of row n over its chunks of K.
  HALO_HD static void partial(const Params& p, int n, int lane, float acc[kQuantGemvMaxM]) {
    const uint8_t* row = p.w.values + static_cast<size_t>(n) * quant_row_bytes<Q>(p.K);
    for (int k = lane * 8; k < p.K; k += 32 * 8) {
      float q[8], s, o;
      load_chunk<Q>(row, k, q);
      group_params(p.w, p.K, n, k, s, o);
      HALO_UNROLL
      for (int m = 0; m < kQuantGemvMaxM; ++m) {
        if (m >= p.M) break;
        const T* xm = p.x + static_cast<size_t>(m) * p.K + k;
        float dq = 0.f, sx = 0.f;
        for (int i = 0; i < 8; ++i) {
          const float xv = to_float(xm[i]);
          dq += xv * q[i];
          sx += xv;
        }
        acc[m] += s * dq + o * sx;
      }
    }
  }

  HALO_HD static int step(int phase, const Params& p, const Ctx& c, Regs&) {
    const int rows = c.nthreads / 32;
    const int r = c.tid / 32, lane = c.tid % 32;
    const int n = c.block.x * rows + r;
    if (phase == 0) {
      float acc[kQuantGemvMaxM] = {};
      if (n < p.N) partial(p, n, lane, acc);
      HALO_UNROLL
      for (int m = 0; m < kQuantGemvMaxM; ++m)
        if (m < p.M) c.smem[m * c.nthreads + c.tid] = acc[m];
      return 1;
    }
    // Threads (r, m) for m < M sum row r's 32 lanes in a fixed order.
    if (lane < p.M && n < p.N) {
      const float* part = c.smem + lane * c.nthreads + r * 32;
      float sum = 0.f;
      for (int i = 0; i < 32; ++i) sum += part[i];
      p.y[static_cast<size_t>(lane) * p.N + n] = sum;
    }
    return kDone;
  }
};

// grid (ceil(N / 64), ceil(M / 32)), 256 threads; shared memory smem_floats().
template <class T, int Q>
struct QuantTiledKernel {
  static constexpr int BM = 32, BN = 64, BK = 32, LD = BK + 1;
  struct Params {
    const T* x;  // [M, K]
    QuantWeight w;
    float* y;  // [M, N]
    int M, N, K;
  };
  struct Regs {
    float acc[8];  // rows 2 tm + {0, 1} x columns tn + 16 {0..3}
  };
  static constexpr int kThreads = 256;
  static constexpr size_t smem_floats() { return static_cast<size_t>(BM + BN) * LD; }

  // x[m0.., k0..] and the dequantized W[n0.., k0..] into shared memory
  // (zeros outside the matrices).
  HALO_HD static void load_tile(const Params& p, const Ctx& c, int k0) {
    const int m0 = c.block.y * BM, n0 = c.block.x * BN;
    float* xs = c.smem;
    float* ws = c.smem + BM * LD;
    for (int e = c.tid; e < BM * BK; e += c.nthreads) {
      const int i = e / BK, kk = e % BK, m = m0 + i, k = k0 + kk;
      xs[i * LD + kk] = m < p.M && k < p.K ? to_float(p.x[static_cast<size_t>(m) * p.K + k]) : 0.f;
    }
    for (int e = c.tid; e < BN * (BK / 8); e += c.nthreads) {
      const int j = e / (BK / 8), kk = e % (BK / 8) * 8, n = n0 + j, k = k0 + kk;
      float q[8] = {}, s = 0.f, o = 0.f;
      if (n < p.N && k < p.K) {
        load_chunk<Q>(p.w.values + static_cast<size_t>(n) * quant_row_bytes<Q>(p.K), k, q);
        group_params(p.w, p.K, n, k, s, o);
      }
      for (int i = 0; i < 8; ++i) ws[j * LD + kk + i] = s * q[i] + o;
    }
  }

  HALO_HD static void multiply(const Ctx& c, Regs& r) {
    const int tm = c.tid / 16, tn = c.tid % 16;
    const float* xs = c.smem;
    const float* ws = c.smem + BM * LD;
    for (int kk = 0; kk < BK; ++kk) {
      const float a0 = xs[(2 * tm) * LD + kk], a1 = xs[(2 * tm + 1) * LD + kk];
      for (int j = 0; j < 4; ++j) {
        const float b = ws[(tn + 16 * j) * LD + kk];
        r.acc[j] += a0 * b;
        r.acc[4 + j] += a1 * b;
      }
    }
  }

  HALO_HD static void store(const Params& p, const Ctx& c, const Regs& r) {
    const int tm = c.tid / 16, tn = c.tid % 16;
    for (int i = 0; i < 2; ++i) {
      const int m = c.block.y * BM + 2 * tm + i;
      for (int j = 0; j < 4; ++j) {
        const int n = c.block.x * BN + tn + 16 * j;
        if (m < p.M && n < p.N) p.y[static_cast<size_t>(m) * p.N + n] = r.acc[4 * i + j];
      }
    }
  }

  // Phase 2 t loads K step t, phase 2 t + 1 multiplies it (then loads the
  // next step after a barrier, or stores).
  HALO_HD static int step(int phase, const Params& p, const Ctx& c, Regs& r) {
    const int t = phase / 2, steps = ceil_div(p.K, BK);
    if (phase % 2 == 0) {
      load_tile(p, c, t * BK);
      return phase + 1;
    }
    multiply(c, r);
    if (t + 1 < steps) return phase + 1;
    store(p, c, r);
    return kDone;
  }
};

// One name per instantiation (launch.h's kernel list takes no commas).
template <class T>
using QuantGemvInt8 = QuantGemvKernel<T, kQuantInt8>;
template <class T>
using QuantGemvUint4 = QuantGemvKernel<T, kQuantUint4>;
template <class T>
using QuantTiledInt8 = QuantTiledKernel<T, kQuantInt8>;
template <class T>
using QuantTiledUint4 = QuantTiledKernel<T, kQuantUint4>;

}  // namespace halo::cuda::k
