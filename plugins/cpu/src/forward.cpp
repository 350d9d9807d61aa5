// One forward step of the CPU plugin, on the fast or the reference kernels
// (see model.h). Both read and write the same KV cache layout. After each
// projection's base matmul, exe.lora adds the LoRA deltas of the step's
// sequences that run an adapter (ABI v1.6, lora.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model.h"

namespace halo::cpu {
namespace {

using kernels::DType;

template <class T>
void grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// Sizes of one step.
struct Dims {
  size_t T, H, I, hd, half, nh, nkv, group, NQ, NKV, NQKV, L;
};

// Shared per-step bookkeeping: grows the scratch buffers, records which
// sequence each token belongs to and how many sequence indices it attends
// to, and fills embeddings and RoPE angles.
Dims begin_step(halo_executable& exe, const halo_execute_args& a) {
  Dims d{};
  d.T = static_cast<size_t>(a.num_tokens);
  d.H = static_cast<size_t>(exe.hidden);
  d.I = static_cast<size_t>(exe.inter);
  d.hd = static_cast<size_t>(exe.head_dim);
  d.half = d.hd / 2;
  d.nh = static_cast<size_t>(exe.heads);
  d.nkv = static_cast<size_t>(exe.kv_heads);
  d.group = d.nh / d.nkv;
  d.NQ = d.nh * d.hd;
  d.NKV = d.nkv * d.hd;
  d.NQKV = d.NQ + 2 * d.NKV;
  d.L = static_cast<size_t>(a.num_logits);
  const size_t T = d.T, H = d.H, half = d.half;
  auto& sc = exe.scratch;
  grow(sc.x, T * H);
  grow(sc.h, T * H);
  grow(sc.tmp, T * H);
  grow(sc.qkv, T * d.NQKV);
  grow(sc.attn, T * d.NQ);
  grow(sc.gu, T * 2 * d.I);
  grow(sc.final_rows, std::max<size_t>(d.L, 1) * H);
  grow(sc.cos, T * half);
  grow(sc.sin, T * half);
  grow(sc.tok_seq, T);
  grow(sc.tok_ctx, T);
  for (int32_t s = 0; s < a.num_seqs; ++s) {
    const int32_t b = a.query_start[s], e = a.query_start[s + 1];
    for (int32_t t = b; t < e; ++t) {
      sc.tok_seq[static_cast<size_t>(t)] = s;
      sc.tok_ctx[static_cast<size_t>(t)] = a.context_lens[s] - (e - b) + (t - b) + 1;
    }
  }
  const size_t esz = kernels::dtype_size(exe.embed.dtype);
  float *x = sc.x.data(), *cs = sc.cos.data(), *sn = sc.sin.data();
  exe.device->pool.parallel_for(T, [&](size_t t, int) {
    kernels::to_f32(static_cast<const char*>(exe.embed.data) + static_cast<size_t>(a.token_ids[t]) * H * esz,
                    exe.embed.dtype, x + t * H, H);
    kernels::rope_cos_sin(a.positions[t], exe.inv_freq.data(), half, cs + t * half, sn + t * half);
  });
  return d;
}

kernels::KvLayer kv_layer(const halo_executable& exe, const halo_kv_cache& kv, size_t l) {
  return kernels::KvLayer{kv.k[l].get(),  kv.v[l].get(), kv.dtype,
                          exe.block_size, exe.kv_heads,  exe.head_dim};
}

// v1.5: the rows lm_head takes, when the caller asked for them.
void copy_hidden_states(const halo_execute_args& a, const float* rows, size_t n) {
  const DLTensor* hs = plugin::hidden_states_out(&a);
  if (hs == nullptr) return;
  std::memcpy(static_cast<char*>(hs->data) + hs->byte_offset, rows, n * sizeof(float));
}

float* logits_out(const halo_execute_args& a) {
  return static_cast<float*>(
      static_cast<void*>(static_cast<char*>(a.logits->data) + a.logits->byte_offset));
}

// y[M, n] (row stride ldy) = x[M, K] (row stride ldx) through one segment of
// a projection; y and bias point at the segment's first column.
void run_segment(halo_executable& exe, const Linear::Segment& g, size_t K, const float* x, size_t M,
                 size_t ldx, const float* bias, float* y, size_t ldy) {
  kernels::ThreadPool& pool = exe.device->pool;
  switch (g.kind) {
    case Linear::Kind::kPackedBf16:
      kernels::gemm_bf16(pool, x, M, ldx, g.packed, bias, y, ldy, exe.scratch.gemm);
      return;
    case Linear::Kind::kQuant:
      kernels::gemm_q(pool, x, M, ldx, g.qpacked, bias, y, ldy, exe.scratch.gemm_q);
      return;
    case Linear::Kind::kOneDnn:
#ifdef HALO_HAVE_ONEDNN
      g.dnnl->forward(x, M, ldx, bias, y, ldy);
#endif
      return;
    case Linear::Kind::kReference:
    case Linear::Kind::kF32: {
      size_t col = 0;
      for (const auto& p : g.parts) {
        kernels::matmul_nt_strided(pool, x, M, K, ldx, p.data, p.dtype, p.rows,
                                   bias ? bias + col : nullptr, y + col, ldy);
        col += p.rows;
      }
      return;
    }
  }
}

// y[M, N] (row stride ldy) = x[M, K] (row stride ldx) through one projection.
void run_linear(halo_executable& exe, const Linear& L, const float* x, size_t M, size_t ldx,
                float* y, size_t ldy) {
  const float* bias = L.bias.empty() ? nullptr : L.bias.data();
  for (const Linear::Segment& g : L.segments)
    run_segment(exe, g, L.K, x, M, ldx, bias ? bias + g.col : nullptr, y + g.col, ldy);
}

}  // namespace

// ------------------------------------------------------------------ fast

void forward_fast(halo_executable& exe, const halo_kv_cache& kv, const halo_execute_args& a) {
  kernels::ThreadPool& pool = exe.device->pool;
  auto& sc = exe.scratch;
  const Dims d = begin_step(exe, a);
  const auto [T, H, I, hd, half, nh, nkv, group, NQ, NKV, NQKV, L] = d;
  const float eps = exe.eps;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float *x = sc.x.data(), *h = sc.h.data(), *tmp = sc.tmp.data(), *qkv = sc.qkv.data(),
        *attn = sc.attn.data();
  float *gu = sc.gu.data(), *cs = sc.cos.data(), *sn = sc.sin.data();

  // Attention work items: (sequence, kv head, chunk of that sequence's query
  // tokens). Chunking only spreads a long prefill over the threads: a query's
  // result does not depend on its chunk.
  constexpr int32_t kQueryChunk = 64;
  std::vector<AttnItem>& items = sc.attn_items;  // shared by the workers: not thread_local
  items.clear();
  for (int32_t s = 0; s < a.num_seqs; ++s)
    for (int32_t q0 = a.query_start[s]; q0 < a.query_start[s + 1]; q0 += kQueryChunk)
      for (int32_t g = 0; g < exe.kv_heads; ++g)
        items.push_back({s, g, q0, std::min(q0 + kQueryChunk, a.query_start[s + 1])});
  const size_t att_scratch = kernels::attention_scratch_floats(kQueryChunk, group, hd,
                                                               static_cast<size_t>(exe.block_size));

  const bool qk_norm = exe.flags & HALO_MODEL_QK_NORM;
  const bool gelu = exe.activation == HALO_ACTIVATION_GELU_TANH;
  for (size_t l = 0; l < exe.layer.size(); ++l) {
    const Layer& W = exe.layer[l];
    // Residual add of the previous layer's MLP output fused with this layer's norm.
    pool.parallel_for(T, [&](size_t t, int) {
      kernels::add_rmsnorm(x + t * H, l == 0 ? nullptr : tmp + t * H, W.attn_norm.data(), H, eps,
                           h + t * H);
    });
    run_linear(exe, W.qkv, h, T, H, qkv, NQKV);
    exe.lora.apply(pool, l, {{plugin::kLoraQ, 0}, {plugin::kLoraK, NQ}, {plugin::kLoraV, NQ + NKV}},
                   h, H, qkv, NQKV);
    const kernels::KvLayer kvl = kv_layer(exe, kv, l);
    pool.parallel_for(T, [&](size_t t, int) {
      float* qt = qkv + t * NQKV;
      float* kt = qt + NQ;
      if (qk_norm) {
        for (size_t i = 0; i < nh; ++i)
          kernels::rmsnorm(qt + i * hd, W.q_norm.data(), hd, eps, qt + i * hd);
        for (size_t i = 0; i < nkv; ++i)
          kernels::rmsnorm(kt + i * hd, W.k_norm.data(), hd, eps, kt + i * hd);
      }
      kernels::rope_neox_fast(qt, nh + nkv, hd, cs + t * half,
                              sn + t * half);  // q and k are adjacent
      if (a.slot_mapping[t] >= 0) kernels::kv_store(kvl, a.slot_mapping[t], kt, kt + NKV);
    });
    pool.parallel_for(items.size(), [&](size_t i, int worker) {
      const AttnItem& it = items[i];
      const size_t q0 = static_cast<size_t>(it.q0), g = static_cast<size_t>(it.head);
      const int32_t* bt =
          a.block_tables + static_cast<size_t>(it.seq) * static_cast<size_t>(a.max_blocks_per_seq);
      kernels::paged_attention_tile(qkv + q0 * NQKV + g * group * hd, NQKV,
                                    static_cast<size_t>(it.q1 - it.q0), group, kvl, it.head, bt,
                                    sc.tok_ctx[q0], scale, attn + q0 * NQ + g * group * hd, NQ,
                                    pool.scratch(worker, 1, att_scratch));
    });
    run_linear(exe, W.o_proj, attn, T, NQ, tmp, H);
    exe.lora.apply(pool, l, {{plugin::kLoraO, 0}}, attn, NQ, tmp, H);
    pool.parallel_for(T, [&](size_t t, int) {
      kernels::add_rmsnorm(x + t * H, tmp + t * H, W.mlp_norm.data(), H, eps, h + t * H);
    });
    run_linear(exe, W.gate_up, h, T, H, gu, 2 * I);
    exe.lora.apply(pool, l, {{plugin::kLoraGate, 0}, {plugin::kLoraUp, I}}, h, H, gu, 2 * I);
    pool.parallel_for(T, [&](size_t t, int) {
      float* g = gu + t * 2 * I;
      if (gelu)
        kernels::gelu_tanh_mul(g, g + I, g, I);
      else
        kernels::silu_mul_fast(g, g + I, g, I);
    });
    run_linear(exe, W.down_proj, gu, T, 2 * I, tmp, H);
    exe.lora.apply(pool, l, {{plugin::kLoraDown, 0}}, gu, 2 * I, tmp, H);
  }

  if (L == 0) return;
  float* fr = sc.final_rows.data();
  pool.parallel_for(L, [&](size_t i, int) {
    // The last MLP's residual add, on a copy: an index may be asked twice.
    const size_t t = static_cast<size_t>(a.logits_indices[i]);
    std::memcpy(fr + i * H, x + t * H, H * sizeof(float));
    kernels::add_rmsnorm(fr + i * H, tmp + t * H, exe.final_norm.data(), H, eps, fr + i * H);
  });
  copy_hidden_states(a, fr, L * H);
  run_linear(exe, exe.lm_head_run, fr, L, H, logits_out(a), static_cast<size_t>(exe.vocab));
}

// ------------------------------------------------------------- reference

void forward_reference(halo_executable& exe, const halo_kv_cache& kv, const halo_execute_args& a) {
  kernels::ThreadPool& pool = exe.device->pool;
  auto& sc = exe.scratch;
  const Dims d = begin_step(exe, a);
  const auto [T, H, I, hd, half, nh, nkv, group, NQ, NKV, NQKV, L] = d;
  const float eps = exe.eps;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float *x = sc.x.data(), *h = sc.h.data(), *tmp = sc.tmp.data(), *qkv = sc.qkv.data(),
        *attn = sc.attn.data();
  float *gu = sc.gu.data(), *cs = sc.cos.data(), *sn = sc.sin.data();

  const bool qk_norm = exe.flags & HALO_MODEL_QK_NORM;
  for (size_t l = 0; l < exe.layer.size(); ++l) {
    const Layer& W = exe.layer[l];
    pool.parallel_for(T, [&](size_t t, int) {
      kernels::rmsnorm(x + t * H, W.attn_norm.data(), H, eps, h + t * H);
    });
    run_linear(exe, W.qkv, h, T, H, qkv, NQKV);
    exe.lora.apply(pool, l, {{plugin::kLoraQ, 0}, {plugin::kLoraK, NQ}, {plugin::kLoraV, NQ + NKV}},
                   h, H, qkv, NQKV);
    const kernels::KvLayer kvl = kv_layer(exe, kv, l);
    pool.parallel_for(T, [&](size_t t, int) {
      float* qt = qkv + t * NQKV;
      float* kt = qt + NQ;
      if (qk_norm) {
        for (size_t i = 0; i < nh; ++i)
          kernels::rmsnorm(qt + i * hd, W.q_norm.data(), hd, eps, qt + i * hd);
        for (size_t i = 0; i < nkv; ++i)
          kernels::rmsnorm(kt + i * hd, W.k_norm.data(), hd, eps, kt + i * hd);
      }
      kernels::rope_neox(qt, nh, hd, cs + t * half, sn + t * half);
      kernels::rope_neox(kt, nkv, hd, cs + t * half, sn + t * half);
      if (a.slot_mapping[t] >= 0) kernels::kv_store(kvl, a.slot_mapping[t], kt, kt + NKV);
    });
    pool.parallel_for(T * nkv, [&](size_t task, int) {
      const size_t t = task / nkv, g = task % nkv;
      const int32_t* bt = a.block_tables + static_cast<size_t>(sc.tok_seq[t]) *
                                               static_cast<size_t>(a.max_blocks_per_seq);
      kernels::paged_attention_reference(qkv + t * NQKV + g * group * hd, NQKV, 1, group, kvl,
                                         static_cast<int32_t>(g), bt, sc.tok_ctx[t], scale,
                                         attn + t * NQ + g * group * hd, NQ);
    });
    run_linear(exe, W.o_proj, attn, T, NQ, tmp, H);
    exe.lora.apply(pool, l, {{plugin::kLoraO, 0}}, attn, NQ, tmp, H);
    pool.parallel_for(T, [&](size_t t, int) {
      kernels::add_inplace(x + t * H, tmp + t * H, H);
      kernels::rmsnorm(x + t * H, W.mlp_norm.data(), H, eps, h + t * H);
    });
    run_linear(exe, W.gate_up, h, T, H, gu, 2 * I);
    exe.lora.apply(pool, l, {{plugin::kLoraGate, 0}, {plugin::kLoraUp, I}}, h, H, gu, 2 * I);
    pool.parallel_for(T, [&](size_t t, int) {
      float* g = gu + t * 2 * I;
      if (exe.activation == HALO_ACTIVATION_GELU_TANH)
        kernels::gelu_tanh_mul(g, g + I, g, I);
      else
        kernels::silu_mul(g, g + I, g, I);
    });
    run_linear(exe, W.down_proj, gu, T, 2 * I, tmp, H);
    exe.lora.apply(pool, l, {{plugin::kLoraDown, 0}}, gu, 2 * I, tmp, H);
    pool.parallel_for(T, [&](size_t t, int) { kernels::add_inplace(x + t * H, tmp + t * H, H); });
  }

  if (L == 0) return;
  float* fr = sc.final_rows.data();
  for (size_t i = 0; i < L; ++i)
    kernels::rmsnorm(x + static_cast<size_t>(a.logits_indices[i]) * H, exe.final_norm.data(), H,
                     eps, fr + i * H);
  copy_hidden_states(a, fr, L * H);
  run_linear(exe, exe.lm_head_run, fr, L, H, logits_out(a), static_cast<size_t>(exe.vocab));
}

}  // namespace halo::cpu
