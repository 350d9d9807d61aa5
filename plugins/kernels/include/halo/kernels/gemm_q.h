// The quantized matmul of the CPU plugin: weights in ABI v1.4's quantized
// layout (int8 or uint4 values, group scales, optional group offsets; see
// halo_quantized_tensor in device_abi.h), pre-packed once at load.
//
// Arithmetic: each row of x is quantized on the fly to int8 in blocks of
// B = 32 input elements (16 when group is not a multiple of 32, so that B
// divides the group) (symmetric, one fp32 scale per block, as llama.cpp's
// Q8_0 activations): per block d = max|x| / 127, id = (d != 0 ? 1 / d : 0),
// xq = round-half-even(x * id) clamped to [-127, 127] (all fp32), xs = d and
// sum_b(xq) kept. Then every block's integer dot product with the weight's
// integer values is scaled in fp32:
//
//   y[m, n] = sum_b  xs[m, b] * (ws[n, b] * dot_b(xq[m], q[n]) + wo[n, b] * sum_b(xq[m]))
//
// (ws/wo: the weight group's scale and offset as packed, wo = 0 when
// symmetric; packing keeps them exactly, except that groups of at most 128
// whose scales and offsets are neither all fp16 nor all bf16 values but all
// lie in fp16's normal range are rounded to nearest fp16 (relative error
// <= 2^-11, far below the weight's own quantization step) to stream fewer
// bytes: GGUF Q4_K's and Q6_K's d * sc, load-time int4's fp32 scales),
// evaluated per block as acc = fma(ws, float(dot) * xs, acc), then, with
// offsets, acc = fma(wo, xs * float(sum), acc); the bias is added last. With
// AVX512-VNNI (vpdpbusd) on the CPU the integer dots run 64 multiply-adds per
// instruction; a portable C++ path computes the same sums otherwise.
//
// Batch invariance: as gemm_bf16, y[m, n] does not depend on M, the row's
// place in the batch or the number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "halo/kernels/dtype.h"
#include "halo/kernels/thread_pool.h"

namespace halo::kernels {

// True if the CPU executes AVX512-VNNI (vpdpbusd); the portable path runs otherwise.
bool cpu_has_avx512_vnni();

// The path gemm_q runs: "vnni" or "portable" (the C++ kernels, built for
// AVX2 + FMA when the CPU has them); tests may also choose "vnni-nogfni" (the
// VNNI kernels without GFNI's nibble unpack, as on CPUs that lack it) and
// "portable-baseline" (the C++ kernels built for baseline x86-64). All give
// the same bits. The environment variable HALO_CPU_GEMM_Q=portable (or
// HALO_KERNELS_SIMD=generic) forces the portable path at start-up.
const char* gemm_q_path();
// Selects one of the paths above by name; false if the CPU cannot run it.
// Switch only while no gemm_q runs (tests, benchmarks).
bool set_gemm_q_path(const char* name);

// Integer type of a quantized weight's values (same numbers as halo_quant_type).
enum class QType : uint8_t { INT8 = 1, UINT4 = 2 };

// One quantized source matrix [rows, K] as the ABI gives it: values int8
// [rows, K] or uint8 [rows, K/2] (low nibble = even element), scales and
// offsets (offsets may be null) [rows, K/group] of scale_dtype.
struct QuantSource {
  QType type = QType::INT8;
  size_t group = 0;  // divides K, multiple of 16
  size_t rows = 0;
  const void* values = nullptr;
  const void* scales = nullptr;
  const void* offsets = nullptr;
  DType scale_dtype = DType::F32;
};

// A weight [N, K] of one QType packed for gemm_q: several sources with the
// same K, QType and group are packed side by side along N (q|k|v, gate|up).
// Owns its memory. Throws std::invalid_argument for a group or K the kernel
// cannot run (group not a multiple of 16 or not dividing K, mixed QTypes or
// groups).
class PackedQWeight {
 public:
  PackedQWeight() = default;
  static PackedQWeight pack(const std::vector<QuantSource>& sources, size_t K);
  size_t N() const { return n_; }
  size_t K() const { return k_; }
  QType type() const { return type_; }
  size_t group() const { return group_; }
  size_t bytes() const;  // memory held: what one full matmul streams

 private:
  size_t n_ = 0, k_ = 0, group_ = 0;
  QType type_ = QType::INT8;
  struct Impl;
  std::shared_ptr<const Impl> impl_;  // layout owned by gemm_q.cpp
  friend struct GemmQAccess;
};

// The quantized activations, grown on demand and reused across calls.
struct GemmQScratch {
  std::vector<int8_t> xq;
  std::vector<float> xs;
  std::vector<int32_t> xsum;
};

// y[m, n] = the formula above (+ bias[n] if bias != nullptr) for m < M, n < N.
// x: [M, K] fp32 with row stride ldx; y: [M, N] fp32 with row stride ldy, must
// not alias x. Runs on the pool; allocates nothing once scratch has grown.
// x must be finite: a NaN or infinity gives unspecified (not necessarily NaN)
// values in its row.
void gemm_q(ThreadPool& pool, const float* x, size_t M, size_t ldx, const PackedQWeight& w,
            const float* bias, float* y, size_t ldy, GemmQScratch& scratch);

// w[n, k] as fp32 (the reference path and tests): dst is [rows, K] row-major.
void dequantize(const QuantSource& src, size_t K, float* dst);

}  // namespace halo::kernels
