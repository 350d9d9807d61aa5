// Token-wise kernels: embedding gather, RMSNorm fused with the residual add,
// bias + q/k-norm + RoPE fused with the KV-cache write, gated activations and
// KV block copies. Per-thread logic only; see common.cuh for the model.
#pragma once

#include "common.cuh"

namespace halo::cuda::k {

// x[t, :] = embed[token_ids[t], :] (fp32 residual stream). grid.x = tokens.
template <class T>
struct EmbedKernel {
  struct Params {
    const int32_t* token_ids;
    const T* table;  // [vocab, hidden]
    float* x;        // [tokens, hidden]
    int hidden;
  };
  struct Regs {};
  HALO_HD static int step(int, const Params& p, const Ctx& c, Regs&) {
    const size_t t = static_cast<size_t>(c.block.x);
    const T* row = p.table + static_cast<size_t>(p.token_ids[t]) * p.hidden;
    for (int h = c.tid; h < p.hidden; h += c.nthreads) p.x[t * p.hidden + h] = to_float(row[h]);
    return kDone;
  }
};

// Output row b reads residual row r = rows ? rows[b] : b:
//   v = x[r] + (delta ? delta[r] : 0); if (write_x) x[r] = v;
//   out[b] = v * rsqrt(mean(v^2) + eps) * w        (out in the GEMM dtype T)
// grid.x = output rows; shared memory: nthreads floats.
template <class T>
struct RmsNormKernel {
  struct Params {
    float* x;
    const float* delta;  // nullable
    const int32_t* rows; // nullable
    const float* w;
    T* out;
    int hidden;
    float eps;
    bool write_x;
  };
  struct Regs {};
  HALO_HD static int step(int phase, const Params& p, const Ctx& c, Regs&) {
    const size_t r = static_cast<size_t>(p.rows ? p.rows[c.block.x] : c.block.x);
    float* x = p.x + r * p.hidden;
    const float* d = p.delta ? p.delta + r * p.hidden : nullptr;
    if (phase == 0) {
      float ss = 0.f;
      for (int h = c.tid; h < p.hidden; h += c.nthreads) {
        const float v = d ? x[h] + d[h] : x[h];
        if (d && p.write_x) x[h] = v;
        ss += v * v;
      }
      c.smem[c.tid] = ss;
      return 1;
    }
    // Every thread sums the partials in the same order: identical results.
    float ss = 0.f;
    for (int i = 0; i < c.nthreads; ++i) ss += c.smem[i];
    const float inv = 1.0f / ::sqrtf(ss / static_cast<float>(p.hidden) + p.eps);
    T* o = p.out + static_cast<size_t>(c.block.x) * p.hidden;
    for (int h = c.tid; h < p.hidden; h += c.nthreads) {
      // With write_x the residual already holds v (this thread wrote it).
      const float v = (d && !p.write_x) ? x[h] + d[h] : x[h];
      o[h] = from_float<T>(v * inv * p.w[h]);
    }
    return kDone;
  }
};

// One token per block. qkv rows are [q heads | k heads | v heads] (fp32 GEMM
// output, row stride qkv_stride). Adds the bias, applies the per-head
// RMSNorm (Qwen3) and the neox rotary embedding with cos/sin of
// positions[t] * inv_freq[i] (computed in double like the CPU plugin); q is
// written back in place, k and v go to the paged cache at slot_mapping[t]
// (-1: not written). Cache layout [slot, kv_heads, head_dim].
// Shared memory: heads + kv_heads floats.
template <class T>
struct RopeKvKernel {
  struct Params {
    float* qkv;
    int qkv_stride;
    const float* bias;    // nullable, [(heads + 2 kv_heads) * head_dim]
    const float* q_norm;  // nullable, [head_dim]
    const float* k_norm;  // nullable, [head_dim]
    const int32_t* positions;
    const int64_t* slot_mapping;
    const double* inv_freq;  // [head_dim / 2]
    T* k_cache;
    T* v_cache;
    int heads, kv_heads, head_dim;
    float eps;
  };
  struct Regs {};
  HALO_HD static int step(int phase, const Params& p, const Ctx& c, Regs&) {
    const size_t t = static_cast<size_t>(c.block.x);
    float* row = p.qkv + t * p.qkv_stride;
    const int D = p.head_dim, half = D / 2;
    const int nq = p.heads * D, nkv = p.kv_heads * D;
    const int64_t slot = p.slot_mapping[t];
    const bool qk_norm = p.q_norm != nullptr;
    if (phase == 0) {
      for (int e = c.tid; e < nq + 2 * nkv; e += c.nthreads) {
        const float v = p.bias ? row[e] + p.bias[e] : row[e];
        if (e < nq + nkv) {
          row[e] = v;
        } else if (slot >= 0) {
          p.v_cache[static_cast<size_t>(slot) * nkv + (e - nq - nkv)] = from_float<T>(v);
        }
      }
      return qk_norm ? 1 : 2;
    }
    if (phase == 1) {
      for (int hh = c.tid; hh < p.heads + p.kv_heads; hh += c.nthreads) {
        float ss = 0.f;
        for (int d = 0; d < D; ++d) ss += row[hh * D + d] * row[hh * D + d];
        c.smem[hh] = 1.0f / ::sqrtf(ss / static_cast<float>(D) + p.eps);
      }
      return 2;
    }
    const double pos = static_cast<double>(p.positions[t]);
    for (int e = c.tid; e < (p.heads + p.kv_heads) * half; e += c.nthreads) {
      const int hh = e / half, i = e % half;
      const bool is_q = hh < p.heads;
      float* v = row + hh * D;
      float a = v[i], b = v[i + half];
      if (qk_norm) {
        const float* w = is_q ? p.q_norm : p.k_norm;
        const float r = c.smem[hh];
        a = a * r * w[i];
        b = b * r * w[i + half];
      }
      const double ang = pos * p.inv_freq[i];
      const float cs = static_cast<float>(::cos(ang)), sn = static_cast<float>(::sin(ang));
      const float ra = a * cs - b * sn, rb = b * cs + a * sn;
      if (is_q) {
        v[i] = ra;
        v[i + half] = rb;
      } else if (slot >= 0) {
        T* kc = p.k_cache + static_cast<size_t>(slot) * nkv + (hh - p.heads) * D;
        kc[i] = from_float<T>(ra);
        kc[i + half] = from_float<T>(rb);
      }
    }
    return kDone;
  }
};

// out[t, i] = act(gu[t, i]) * gu[t, inter + i]; grid-stride over tokens x inter.
template <class T>
struct GatedActKernel {
  struct Params {
    const float* gu;  // [tokens, 2 * inter]: gate | up
    T* out;           // [tokens, inter]
    int64_t tokens;
    int inter;
    bool gelu_tanh;
  };
  struct Regs {};
  HALO_HD static int step(int, const Params& p, const Ctx& c, Regs&) {
    const int64_t total = p.tokens * p.inter;
    const int64_t stride = static_cast<int64_t>(c.grid.x) * c.nthreads;
    for (int64_t e = static_cast<int64_t>(c.block.x) * c.nthreads + c.tid; e < total; e += stride) {
      const int64_t t = e / p.inter, i = e % p.inter;
      const float g = p.gu[t * 2 * p.inter + i], u = p.gu[t * 2 * p.inter + p.inter + i];
      float a;
      if (p.gelu_tanh) {
        const float k0 = 0.7978845608028654f;  // sqrt(2 / pi)
        a = 0.5f * g * (1.0f + ::tanhf(k0 * (g + 0.044715f * g * g * g)));
      } else {
        a = g / (1.0f + ::expf(-g));
      }
      p.out[e] = from_float<T>(a * u);
    }
    return kDone;
  }
};

// Whole-block copies of the paged cache: grid (pairs, arrays); array a of the
// cache starts at base + a * array_words, a block is block_words words.
struct CopyBlocksKernel {
  struct Params {
    uint32_t* base;
    const int32_t* src;
    const int32_t* dst;
    size_t array_words;
    size_t block_words;
  };
  struct Regs {};
  HALO_HD static int step(int, const Params& p, const Ctx& c, Regs&) {
    const int s = p.src[c.block.x], d = p.dst[c.block.x];
    if (s == d) return kDone;
    uint32_t* a = p.base + static_cast<size_t>(c.block.y) * p.array_words;
    const uint32_t* from = a + static_cast<size_t>(s) * p.block_words;
    uint32_t* to = a + static_cast<size_t>(d) * p.block_words;
    for (size_t i = static_cast<size_t>(c.tid); i < p.block_words; i += static_cast<size_t>(c.nthreads)) to[i] = from[i];
    return kDone;
  }
};

}  // namespace halo::cuda::k
