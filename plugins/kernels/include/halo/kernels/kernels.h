// Host kernels of a decoder-only transformer step. All matrices are
// row-major; weights are [out, in] (nn.Linear) in fp32, bf16 or fp16 and are
// converted on the fly with fp32 accumulation.
//
// Determinism: every output element is computed by the same sequence of
// floating-point operations whatever the number of threads, so results are
// bitwise identical for any ThreadPool size on a given machine.
#pragma once

#include <cstddef>
#include <cstdint>

#include "halo/kernels/dtype.h"
#include "halo/kernels/thread_pool.h"

namespace halo::kernels {

// Name of the SIMD path in use ("avx512" or "generic").
const char* simd_name();
// Selects a SIMD path by name ("generic", "avx512"); false if unavailable.
// The environment variable HALO_KERNELS_SIMD=generic forces the portable path
// at start-up. Switch only while no kernel is running (tests).
bool set_simd_path(const char* name);

// Dot product and y += a * x over fp32 vectors.
float dot_f32(const float* a, const float* b, size_t n);
void axpy_f32(float* y, float a, const float* x, size_t n);

// y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n] when bias != nullptr).
// x: [M, K] fp32 contiguous; w: [N, K] of type wt contiguous; y: [M, N] fp32
// contiguous and must not alias x. Parallel over blocks of rows and columns.
void matmul_nt(ThreadPool& pool, const float* x, size_t M, size_t K, const void* w, DType wt,
               size_t N, const float* bias, float* y);

// The same with row strides: x rows ldx >= K apart, y rows ldy >= N apart.
void matmul_nt_strided(ThreadPool& pool, const float* x, size_t M, size_t K, size_t ldx, const void* w,
                       DType wt, size_t N, const float* bias, float* y, size_t ldy);

// out = x * rsqrt(mean(x^2) + eps) * w for one row of n values (out may be x).
void rmsnorm(const float* x, const float* w, size_t n, float eps, float* out);

// Rotary embedding, neox half-split layout, applied in place to num_heads
// vectors of head_dim values each (stride head_dim): for i < head_dim/2,
// (x[i], x[i+d/2]) <- (x[i]*c - x[i+d/2]*s, x[i+d/2]*c + x[i]*s) with
// c = cos_half[i], s = sin_half[i].
void rope_neox(float* x, size_t num_heads, size_t head_dim, const float* cos_half,
               const float* sin_half);

// Rotary inverse frequencies inv_freq[i] = theta^(-2i/head_dim), i < head_dim/2.
enum class RopeScaling { None, Linear, Llama3 };
struct RopeParams {
  double theta = 10000.0;
  RopeScaling scaling = RopeScaling::None;
  double factor = 1.0;            // Linear, Llama3
  double low_freq_factor = 1.0;   // Llama3
  double high_freq_factor = 4.0;  // Llama3
  double original_max_position = 8192.0;  // Llama3
};
// Fills inv_freq[head_dim/2] including the scaling (Linear divides by factor,
// Llama3 follows HF transformers' _compute_llama3_parameters).
void rope_inv_freq(const RopeParams& p, size_t head_dim, double* inv_freq);
// cos/sin of position * inv_freq[i] for i < half.
void rope_cos_sin(double position, const double* inv_freq, size_t half, float* cos_half,
                  float* sin_half);

// Gated activations over n values: out[i] = act(gate[i]) * up[i] (out may alias gate).
void silu_mul(const float* gate, const float* up, float* out, size_t n);
void gelu_tanh_mul(const float* gate, const float* up, float* out, size_t n);

// y[i] += x[i]
void add_inplace(float* y, const float* x, size_t n);

// Paged KV cache of one layer: [num_blocks, block_size, kv_heads, head_dim] fp32.
struct PagedKV {
  const float* k = nullptr;
  const float* v = nullptr;
  int32_t block_size = 0;
  int32_t kv_heads = 0;
  int32_t head_dim = 0;
};

// Attention of `group` query heads that share one kv head over sequence
// indices [0, n_ctx) read through block_table (entry j holds indices
// [j*block_size, (j+1)*block_size)). q: group vectors of head_dim (stride
// head_dim); out: same shape. scores: scratch of at least n_ctx floats.
// Softmax in fp32 with the max subtracted; scale usually 1/sqrt(head_dim).
void paged_attention(const float* q, size_t group, const PagedKV& kv, int32_t kv_head,
                     const int32_t* block_table, int32_t n_ctx, float scale, float* scores,
                     float* out);

}  // namespace halo::kernels
