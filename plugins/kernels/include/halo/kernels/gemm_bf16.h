// The fast matmul of the CPU plugin: bf16 activations x bf16 weights with
// fp32 accumulation (AMX tdpbf16ps or AVX512-BF16 vdpbf16ps where the CPU has
// them), weights pre-packed once at load into a blocked layout the kernel
// streams.
//
// Batch invariance: every output element y[m, n] is computed by the same
// sequence of operations whatever M, the row's place in the batch and the
// number of threads (one accumulator per element, K walked in one fixed
// order, never split across threads), so a sequence gets bitwise the same
// logits alone or batched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "halo/kernels/dtype.h"
#include "halo/kernels/thread_pool.h"

namespace halo::kernels {

// True if the CPU executes AVX512-BF16 (vdpbf16ps); the portable path runs otherwise.
bool cpu_has_avx512_bf16();
// True if the CPU has AMX-TILE and AMX-BF16 and Linux lets this process use
// the tiles (asked for once, for the whole process, on the first call).
bool cpu_has_amx_bf16();

// The path gemm_bf16 runs: "amx" (tdpbf16ps), "avx512-bf16" (vdpbf16ps) or
// "generic" (portable, vdpbf16ps's arithmetic). AMX is used when available,
// for every M (its rounding differs from vdpbf16ps's, so mixing paths would
// break batch invariance), unless the environment has HALO_GEMM_AMX=0. The
// portable path is forced with HALO_KERNELS_SIMD=generic (set_simd_path).
const char* gemm_bf16_path();
// Turns the AMX path on or off; false if asked on where it is unavailable.
// Switch only while no gemm runs (tests, benchmarks): results change in the
// low bits between paths.
bool set_gemm_bf16_amx(bool on);

// One source matrix of a packed weight: row-major [rows, K] (nn.Linear
// [out, in]) of type dtype. Several sources with the same K are packed side by
// side into one weight, so q/k/v or gate/up run as one matmul whose output
// columns are the sources' rows in order.
struct WeightSource {
  const void* data = nullptr;
  DType dtype = DType::BF16;
  size_t rows = 0;
};

// A weight [N, K] converted to bf16 (fp32/fp16 sources are rounded to nearest
// even) and laid out for gemm_bf16. Owns its memory.
class PackedWeight {
 public:
  PackedWeight() = default;
  static PackedWeight pack(const std::vector<WeightSource>& sources, size_t K);
  size_t N() const { return n_; }
  size_t K() const { return k_; }
  size_t bytes() const;        // memory held, the bytes one full matmul streams
  const uint16_t* data() const { return data_.get(); }

 private:
  struct Free {
    void operator()(uint16_t* p) const noexcept;
  };
  size_t n_ = 0, k_ = 0;
  size_t stride_ = 0;  // layout detail owned by gemm_bf16.cpp
  std::unique_ptr<uint16_t, Free> data_;
  friend struct GemmAccess;
};

// Activations converted once per matmul call.
struct GemmScratch {
  std::vector<uint16_t> x_bf16;
};

// y[m, n] = sum_k bf16(x[m, k]) * W[n, k] (+ bias[n] if bias != nullptr) for
// m < M, n < N. x: [M, K] fp32 with row stride ldx; y: [M, N] fp32 with row
// stride ldy, must not alias x. Runs on the pool; allocates nothing once
// scratch has grown to M * K.
void gemm_bf16(ThreadPool& pool, const float* x, size_t M, size_t ldx, const PackedWeight& w,
               const float* bias, float* y, size_t ldy, GemmScratch& scratch);

}  // namespace halo::kernels
