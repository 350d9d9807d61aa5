// Paged attention of the CPU plugin's fast path: K/V read through the block
// table from a cache stored in fp32 or bf16, AVX-512 dot products and an
// online (single-pass) softmax, prefill tiled over the query tokens of one
// sequence so every K/V block is loaded once for the whole tile.
//
// Batch invariance: a query token's result is computed by the same sequence
// of operations whether it is decoded alone, sits in a prefill tile or in a
// chunk of a chunked prefill (K/V visited block by block in order, one
// running max/sum/accumulator per query head).
//
// SIMD: these kernels follow the path chosen by set_simd_path() /
// HALO_KERNELS_SIMD (kernels.h): AVX-512 when "avx512", portable C++ otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

#include "halo/kernels/dtype.h"

namespace halo::kernels {

// One layer's paged cache: K and V of [num_blocks, block_size, kv_heads, head_dim]
// elements of type dtype (F32 or BF16).
struct KvLayer {
  void* k = nullptr;
  void* v = nullptr;
  DType dtype = DType::F32;
  int32_t block_size = 0;
  int32_t kv_heads = 0;
  int32_t head_dim = 0;
};

// Stores one token's K and V (kv_heads * head_dim values each, fp32) in slot
// `slot` (= block * block_size + offset), converting to the cache's dtype
// (bf16: round to nearest even).
void kv_store(const KvLayer& kv, int64_t slot, const float* k, const float* v);

// Causal attention of n_q consecutive query tokens of one sequence for the
// `group` query heads that share kv head `kv_head`. Query token i (i < n_q)
// attends to sequence indices [0, ctx0 + i) where ctx0 >= 1 is the context
// length of the first query token (its own K/V already stored).
//   q:   query i, head g at q + i * q_stride + g * head_dim (fp32)
//   out: same layout with out_stride
// block_table lists the sequence's blocks. scratch: at least
// attention_scratch_floats(n_q, group, head_dim, block_size) floats.
void paged_attention_tile(const float* q, size_t q_stride, size_t n_q, size_t group, const KvLayer& kv,
                          int32_t kv_head, const int32_t* block_table, int32_t ctx0, float scale,
                          float* out, size_t out_stride, float* scratch);
size_t attention_scratch_floats(size_t n_q, size_t group, size_t head_dim, size_t block_size);

// The same attention computed the plain way (two passes, scalar), for the
// reference path and for tests.
void paged_attention_reference(const float* q, size_t q_stride, size_t n_q, size_t group,
                               const KvLayer& kv, int32_t kv_head, const int32_t* block_table,
                               int32_t ctx0, float scale, float* out, size_t out_stride);

// Fused elementwise work, one row at a time, vectorized:
// x += delta (when delta != nullptr), then out = rmsnorm(x) * w.
void add_rmsnorm(float* x, const float* delta, const float* w, size_t n, float eps, float* out);
// out[i] = silu(gate[i]) * up[i]; out may alias gate.
void silu_mul_fast(const float* gate, const float* up, float* out, size_t n);
// Neox RoPE of num_heads vectors (stride head_dim), in place, vectorized.
void rope_neox_fast(float* x, size_t num_heads, size_t head_dim, const float* cos_half, const float* sin_half);

}  // namespace halo::kernels
