#include "model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string_view>
#include <type_traits>

#include "errors.h"
#include "sysinfo.h"

namespace halo::cpu {
namespace {

using kernels::DType;

}  // namespace

void prepare(halo_prepare_args* args) {
  check_args("prepare", args, "prepare: args");
  if (args->device == nullptr) invalid("prepare: device is NULL");
  validate_spec(args->spec, "cpu");
  halo_limits* lim = args->limits;
  check_args("prepare", lim, "prepare: limits");
  if (args->num_options > 0 && args->options == nullptr)
    invalid("prepare: options=NULL with num_options=", args->num_options);
  const halo_model_spec& s = *args->spec;

  auto exe = std::make_unique<halo_executable>();
  exe->device = args->device->state;
  exe->architecture = s.architecture ? s.architecture : "";
  exe->vocab = s.vocab_size;
  exe->hidden = s.hidden_size;
  exe->inter = s.intermediate_size;
  exe->layers = s.num_layers;
  exe->heads = s.num_heads;
  exe->kv_heads = s.num_kv_heads;
  exe->head_dim = s.head_dim;
  exe->eps = s.rms_norm_eps;
  exe->flags = s.flags;
  exe->activation = s.activation;

  const kernels::RopeParams rp = rope_params(s);
  exe->inv_freq.resize(static_cast<size_t>(s.head_dim / 2));
  kernels::rope_inv_freq(rp, static_cast<size_t>(s.head_dim), exe->inv_freq.data());

  // Weights.
  const WeightSet w(args->weights, args->num_weights);
  const int64_t V = s.vocab_size, H = s.hidden_size, I = s.intermediate_size;
  const int64_t NQ = int64_t{s.num_heads} * s.head_dim, NKV = int64_t{s.num_kv_heads} * s.head_dim;
  exe->embed = w.get("embed_tokens", {V, H});
  exe->layer.resize(static_cast<size_t>(s.num_layers));
  for (int32_t i = 0; i < s.num_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    halo::cpu::Layer& L = exe->layer[static_cast<size_t>(i)];
    L.attn_norm = w.vec(p + "attn_norm", H);
    L.q = w.get(p + "q_proj", {NQ, H});
    L.k = w.get(p + "k_proj", {NKV, H});
    L.v = w.get(p + "v_proj", {NKV, H});
    if (s.flags & HALO_MODEL_QKV_BIAS) {
      L.q_bias = w.vec(p + "q_bias", NQ);
      L.k_bias = w.vec(p + "k_bias", NKV);
      L.v_bias = w.vec(p + "v_bias", NKV);
    }
    if (s.flags & HALO_MODEL_QK_NORM) {
      L.q_norm = w.vec(p + "q_norm", s.head_dim);
      L.k_norm = w.vec(p + "k_norm", s.head_dim);
    }
    L.o = w.get(p + "o_proj", {H, NQ});
    L.mlp_norm = w.vec(p + "mlp_norm", H);
    L.gate = w.get(p + "gate_proj", {I, H});
    L.up = w.get(p + "up_proj", {I, H});
    L.down = w.get(p + "down_proj", {H, I});
  }
  exe->final_norm = w.vec("final_norm", H);
  exe->lm_head = (s.flags & HALO_MODEL_TIED_EMBEDDINGS) ? exe->embed : w.get("lm_head", {V, H});

  // Limits.
  auto nonneg = [](const char* name, int32_t v) {
    if (v < 0) invalid("prepare: limits.", name, "=", v, " must not be negative (0 = default)");
  };
  nonneg("max_num_seqs", lim->max_num_seqs);
  nonneg("max_model_len", lim->max_model_len);
  nonneg("max_num_batched_tokens", lim->max_num_batched_tokens);
  nonneg("block_size", lim->block_size);
  exe->max_num_seqs = lim->max_num_seqs ? lim->max_num_seqs : 256;
  exe->max_model_len = lim->max_model_len ? lim->max_model_len : s.max_position_embeddings;
  exe->max_num_batched_tokens =
      lim->max_num_batched_tokens ? lim->max_num_batched_tokens : std::max(2048, exe->max_model_len);
  exe->block_size = lim->block_size ? lim->block_size : 16;
  exe->kv_bytes_per_block = 2ull * static_cast<uint64_t>(s.num_layers) * static_cast<uint64_t>(exe->block_size) *
                            static_cast<uint64_t>(NKV) * sizeof(float);
  const uint64_t avail = memory_available();
  const uint64_t margin = std::max<uint64_t>(avail / 10, 256ull << 20);

  lim->max_num_seqs = exe->max_num_seqs;
  lim->max_model_len = exe->max_model_len;
  lim->max_num_batched_tokens = exe->max_num_batched_tokens;
  lim->block_size = exe->block_size;
  lim->capabilities = HALO_CAP_CHUNKED_PREFILL | HALO_CAP_MIXED_BATCH;
  lim->kv_bytes_per_block = exe->kv_bytes_per_block;
  lim->kv_memory_available = avail > margin ? avail - margin : 0;
  args->executable = exe.release();
}

void kv_cache_create(halo_kv_cache_create_args* args) {
  check_args("kv_cache_create", args, "kv_cache_create: args");
  const halo_executable* exe = args->executable;
  if (exe == nullptr) invalid("kv_cache_create: executable is NULL");
  if (args->num_blocks <= 0) invalid("kv_cache_create: num_blocks=", args->num_blocks, " must be positive");
  if (args->block_size != exe->block_size)
    invalid("kv_cache_create: block_size=", args->block_size, " does not match the prepared block_size=",
            exe->block_size);
  const size_t block_floats =
      static_cast<size_t>(exe->block_size) * static_cast<size_t>(exe->kv_heads) * static_cast<size_t>(exe->head_dim);
  const uint64_t total = exe->kv_bytes_per_block * static_cast<uint64_t>(args->num_blocks);
  const uint64_t phys = host_info().memory_total;
  if (phys > 0 && total > phys)
    fail(HALO_STATUS_OUT_OF_MEMORY, "kv_cache_create: num_blocks=", args->num_blocks, " needs ", total,
         " bytes, more than the host's ", phys, " bytes of memory");
  auto kv = std::make_unique<halo_kv_cache>();
  kv->owner = exe;
  kv->num_blocks = args->num_blocks;
  kv->block_size = exe->block_size;
  kv->block_floats = block_floats;
  const size_t n = block_floats * static_cast<size_t>(args->num_blocks);
  for (int32_t l = 0; l < exe->layers; ++l) {
    for (auto* vec : {&kv->k, &kv->v}) {
      // calloc: zeroed pages are mapped lazily, so a large cache costs nothing until used.
      FloatArray a(static_cast<float*>(std::calloc(n, sizeof(float))));
      if (!a)
        fail(HALO_STATUS_OUT_OF_MEMORY, "kv_cache_create: cannot allocate ", n * sizeof(float),
             " bytes for layer ", l, " (num_blocks=", args->num_blocks, ")");
      vec->push_back(std::move(a));
    }
  }
  args->kv_cache = kv.release();
}

void kv_cache_copy_blocks(halo_kv_cache_copy_blocks_args* args) {
  check_args("kv_cache_copy_blocks", args, "kv_cache_copy_blocks: args");
  halo_kv_cache* kv = args->kv_cache;
  if (kv == nullptr) invalid("kv_cache_copy_blocks: kv_cache is NULL");
  if (args->num_pairs < 0) invalid("kv_cache_copy_blocks: num_pairs=", args->num_pairs, " is negative");
  if (args->num_pairs == 0) return;
  if (args->src_blocks == nullptr || args->dst_blocks == nullptr)
    invalid("kv_cache_copy_blocks: src_blocks or dst_blocks is NULL with num_pairs=", args->num_pairs);
  for (int32_t i = 0; i < args->num_pairs; ++i) {
    for (const auto& [name, arr] : {std::pair{"src_blocks", args->src_blocks}, {"dst_blocks", args->dst_blocks}}) {
      if (arr[i] < 0 || arr[i] >= kv->num_blocks)
        out_of_range("kv_cache_copy_blocks: ", name, "[", i, "]=", arr[i], " is outside [0, ", kv->num_blocks, ")");
    }
  }
  const size_t bf = kv->block_floats;
  for (size_t l = 0; l < kv->k.size(); ++l) {
    for (float* base : {kv->k[l].get(), kv->v[l].get()}) {
      for (int32_t i = 0; i < args->num_pairs; ++i) {
        if (args->src_blocks[i] == args->dst_blocks[i]) continue;
        std::memcpy(base + static_cast<size_t>(args->dst_blocks[i]) * bf,
                    base + static_cast<size_t>(args->src_blocks[i]) * bf, bf * sizeof(float));
      }
    }
  }
}

namespace {

template <class T>
void grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

void execute(halo_execute_args* a) {
  check_args("execute", a, "execute: args");
  halo_executable* exe = a->executable;
  const halo_kv_cache* kv = a->kv_cache;
  if (exe == nullptr) invalid("execute: executable is NULL");
  if (kv == nullptr) invalid("execute: kv_cache is NULL");
  if (kv->owner != exe) invalid("execute: kv_cache was created for a different executable");
  const ExecLimits lim{exe->vocab, exe->max_num_seqs, exe->max_model_len, exe->max_num_batched_tokens,
                       exe->block_size};
  const KvLimits kvl{kv->num_blocks, kv->block_size};
  validate_execute(a, &lim, &kvl);

  std::lock_guard<std::mutex> lock(exe->device->exec_mu);
  kernels::ThreadPool& pool = exe->device->pool;
  const size_t T = static_cast<size_t>(a->num_tokens);
  const size_t H = static_cast<size_t>(exe->hidden), I = static_cast<size_t>(exe->inter);
  const size_t hd = static_cast<size_t>(exe->head_dim), half = hd / 2;
  const size_t nh = static_cast<size_t>(exe->heads), nkv = static_cast<size_t>(exe->kv_heads);
  const size_t group = nh / nkv;
  const size_t NQ = nh * hd, NKV = nkv * hd;
  const size_t L = static_cast<size_t>(a->num_logits);
  const float eps = exe->eps;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  auto& sc = exe->scratch;
  grow(sc.x, T * H);
  grow(sc.h, T * H);
  grow(sc.tmp, T * H);
  grow(sc.q, T * NQ);
  grow(sc.attn, T * NQ);
  grow(sc.k, T * NKV);
  grow(sc.v, T * NKV);
  grow(sc.gate, T * I);
  grow(sc.up, T * I);
  grow(sc.cos, T * half);
  grow(sc.sin, T * half);
  grow(sc.final_rows, std::max<size_t>(L, 1) * H);
  grow(sc.tok_seq, T);
  grow(sc.tok_ctx, T);
  float *x = sc.x.data(), *h = sc.h.data(), *tmp = sc.tmp.data(), *q = sc.q.data(), *attn = sc.attn.data();
  float *k = sc.k.data(), *v = sc.v.data(), *gate = sc.gate.data(), *up = sc.up.data();
  float *cs = sc.cos.data(), *sn = sc.sin.data();

  // Sequence of each token and how many sequence indices it attends to.
  for (int32_t s = 0; s < a->num_seqs; ++s) {
    const int32_t b = a->query_start[s], e = a->query_start[s + 1];
    for (int32_t t = b; t < e; ++t) {
      sc.tok_seq[static_cast<size_t>(t)] = s;
      sc.tok_ctx[static_cast<size_t>(t)] = a->context_lens[s] - (e - b) + (t - b) + 1;
    }
  }

  const size_t esz = kernels::dtype_size(exe->embed.dtype);
  pool.parallel_for(T, [&](size_t t, int) {
    kernels::to_f32(static_cast<const char*>(exe->embed.data) + static_cast<size_t>(a->token_ids[t]) * H * esz,
                    exe->embed.dtype, x + t * H, H);
    kernels::rope_cos_sin(a->positions[t], exe->inv_freq.data(), half, cs + t * half, sn + t * half);
  });

  const bool qk_norm = exe->flags & HALO_MODEL_QK_NORM;
  for (size_t l = 0; l < exe->layer.size(); ++l) {
    const halo::cpu::Layer& W = exe->layer[l];
    float* kc = kv->k[l].get();
    float* vc = kv->v[l].get();
    pool.parallel_for(T, [&](size_t t, int) { kernels::rmsnorm(x + t * H, W.attn_norm.data(), H, eps, h + t * H); });
    const float* qb = W.q_bias.empty() ? nullptr : W.q_bias.data();
    const float* kb = W.k_bias.empty() ? nullptr : W.k_bias.data();
    const float* vb = W.v_bias.empty() ? nullptr : W.v_bias.data();
    kernels::matmul_nt(pool, h, T, H, W.q.data, W.q.dtype, NQ, qb, q);
    kernels::matmul_nt(pool, h, T, H, W.k.data, W.k.dtype, NKV, kb, k);
    kernels::matmul_nt(pool, h, T, H, W.v.data, W.v.dtype, NKV, vb, v);
    pool.parallel_for(T, [&](size_t t, int) {
      float* qt = q + t * NQ;
      float* kt = k + t * NKV;
      if (qk_norm) {
        for (size_t i = 0; i < nh; ++i) kernels::rmsnorm(qt + i * hd, W.q_norm.data(), hd, eps, qt + i * hd);
        for (size_t i = 0; i < nkv; ++i) kernels::rmsnorm(kt + i * hd, W.k_norm.data(), hd, eps, kt + i * hd);
      }
      kernels::rope_neox(qt, nh, hd, cs + t * half, sn + t * half);
      kernels::rope_neox(kt, nkv, hd, cs + t * half, sn + t * half);
      const int64_t slot = a->slot_mapping[t];
      if (slot >= 0) {
        std::memcpy(kc + static_cast<size_t>(slot) * NKV, kt, NKV * sizeof(float));
        std::memcpy(vc + static_cast<size_t>(slot) * NKV, v + t * NKV, NKV * sizeof(float));
      }
    });
    const kernels::PagedKV pkv{kc, vc, exe->block_size, exe->kv_heads, exe->head_dim};
    pool.parallel_for(T * nkv, [&](size_t task, int worker) {
      const size_t t = task / nkv, g = task % nkv;
      const int32_t s = sc.tok_seq[t];
      const int32_t n_ctx = sc.tok_ctx[t];
      float* scores = pool.scratch(worker, 1, static_cast<size_t>(n_ctx));
      const int32_t* bt = a->block_tables + static_cast<size_t>(s) * static_cast<size_t>(a->max_blocks_per_seq);
      kernels::paged_attention(q + t * NQ + g * group * hd, group, pkv, static_cast<int32_t>(g), bt, n_ctx, scale,
                               scores, attn + t * NQ + g * group * hd);
    });
    kernels::matmul_nt(pool, attn, T, NQ, W.o.data, W.o.dtype, H, nullptr, tmp);
    pool.parallel_for(T, [&](size_t t, int) {
      kernels::add_inplace(x + t * H, tmp + t * H, H);
      kernels::rmsnorm(x + t * H, W.mlp_norm.data(), H, eps, h + t * H);
    });
    kernels::matmul_nt(pool, h, T, H, W.gate.data, W.gate.dtype, I, nullptr, gate);
    kernels::matmul_nt(pool, h, T, H, W.up.data, W.up.dtype, I, nullptr, up);
    pool.parallel_for(T, [&](size_t t, int) {
      if (exe->activation == HALO_ACTIVATION_GELU_TANH)
        kernels::gelu_tanh_mul(gate + t * I, up + t * I, gate + t * I, I);
      else
        kernels::silu_mul(gate + t * I, up + t * I, gate + t * I, I);
    });
    kernels::matmul_nt(pool, gate, T, I, W.down.data, W.down.dtype, H, nullptr, tmp);
    pool.parallel_for(T, [&](size_t t, int) { kernels::add_inplace(x + t * H, tmp + t * H, H); });
  }

  if (L == 0) return;
  float* fr = sc.final_rows.data();
  for (size_t i = 0; i < L; ++i)
    kernels::rmsnorm(x + static_cast<size_t>(a->logits_indices[i]) * H, exe->final_norm.data(), H, eps, fr + i * H);
  float* out = static_cast<float*>(static_cast<void*>(static_cast<char*>(a->logits->data) + a->logits->byte_offset));
  kernels::matmul_nt(pool, fr, L, H, exe->lm_head.data, exe->lm_head.dtype, static_cast<size_t>(exe->vocab), nullptr,
                     out);
}

}  // namespace halo::cpu
