#include "model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string_view>
#include <type_traits>

#include "errors.h"
#include "halo/plugin_support/options.h"
#include "sysinfo.h"

namespace halo::cpu {
namespace {

using kernels::DType;

// The prepare options (docs/cpu.md). kernels and matmul fall back to the
// environment variables HALO_CPU_KERNELS / HALO_CPU_MATMUL, then to fast /
// halo: the variables predate the options and remain their documented defaults.
struct CpuOptions {
  std::string kernels, kernels_source, matmul, matmul_source, dtype;
};

// An option's value, else the environment variable's, else `fallback`; `source`
// says which, for messages.
std::string option_or_env(OptionReader& r, const char* key, const char* env, const char* fallback,
                          std::string* source) {
  if (auto v = r.get(key)) {
    *source = cat("option ", key);
    return std::string(*v);
  }
  *source = env;
  const char* e = std::getenv(env);
  return e && *e ? e : fallback;
}

CpuOptions read_prepare_options(const halo_prepare_args* args) {
  OptionReader r("prepare", args->options, args->num_options);
  CpuOptions o;
  o.kernels = option_or_env(r, "kernels", "HALO_CPU_KERNELS", "fast", &o.kernels_source);
  if (o.kernels != "fast" && o.kernels != "reference")
    invalid("prepare: ", o.kernels_source, "=\"", o.kernels, "\" is not one of fast, reference");
  o.matmul = option_or_env(r, "matmul", "HALO_CPU_MATMUL", "halo", &o.matmul_source);
  if (o.matmul == "native") o.matmul = "halo";  // the name the issue used for the built-in GEMM
  if (o.matmul != "halo" && o.matmul != "onednn")
    invalid("prepare: ", o.matmul_source, "=\"", o.matmul, "\" is not one of halo, onednn");
  // dtype: the matmul precision of the fast path. auto: bf16 GEMM for 16-bit
  // weights, fp32 for fp32 weights; bfloat16: every weight packed to bf16 (fp32
  // converted at load); float32: fp32 activations throughout.
  o.dtype = std::string(r.str("dtype", "auto"));
  if (o.dtype == "bf16") o.dtype = "bfloat16";
  if (o.dtype == "fp32" || o.dtype == "float") o.dtype = "float32";
  if (o.dtype == "float16" || o.dtype == "fp16" || o.dtype == "half")
    invalid("prepare: option dtype=", o.dtype,
            ": the cpu plugin has no fp16 arithmetic; fp16 weights run as bf16 (dtype auto or "
            "bfloat16)");
  if (o.dtype != "auto" && o.dtype != "bfloat16" && o.dtype != "float32")
    invalid("prepare: option dtype=\"", o.dtype, "\" is not one of auto, bfloat16, float32");
  r.also_known({"threads"});  // device_open's
  r.refuse_unknown();
  return o;
}

// The spec's shapes, copied into the executable, and the RoPE frequencies.
void copy_spec(halo_executable& exe, const halo_model_spec& s) {
  exe.architecture = s.architecture ? s.architecture : "";
  exe.vocab = s.vocab_size;
  exe.hidden = s.hidden_size;
  exe.inter = s.intermediate_size;
  exe.layers = s.num_layers;
  exe.heads = s.num_heads;
  exe.kv_heads = s.num_kv_heads;
  exe.head_dim = s.head_dim;
  exe.eps = s.rms_norm_eps;
  exe.flags = s.flags;
  exe.activation = s.activation;

  const kernels::RopeParams rp = rope_params(s);
  exe.inv_freq.resize(static_cast<size_t>(s.head_dim / 2));
  kernels::rope_inv_freq(rp, static_cast<size_t>(s.head_dim), exe.inv_freq.data());
}

// Whether the fast path's 16-bit matmuls go to oneDNN (option matmul=onednn);
// refuses it where oneDNN cannot run them.
bool use_onednn_matmul(const halo_executable& exe, const CpuOptions& opt,
                       const halo_prepare_args* args) {
#ifdef HALO_HAVE_ONEDNN
  const bool use_onednn = exe.fast && opt.matmul == "onednn";
  if (use_onednn && !onednn::available())
    fail(HALO_STATUS_FAILED_PRECONDITION,
         "prepare: matmul=onednn (", opt.matmul_source, ") but oneDNN has no bf16 matmul on this CPU");
  if (use_onednn) onednn::set_num_threads(args->device->threads);
  return use_onednn;
#else
  (void)exe;
  (void)args;
  if (opt.matmul == "onednn")
    fail(HALO_STATUS_FAILED_PRECONDITION, "prepare: matmul=onednn (", opt.matmul_source,
         ") but this plugin was built without oneDNN");
  return false;
#endif
}

// One part of a projection as given: a plain matrix, or a quantized one (v1.4).
struct Part {
  kernels::WeightSource plain;  // when q == nullptr
  const QuantMatrix* q = nullptr;
  size_t rows() const { return q ? static_cast<size_t>(q->rows) : plain.rows; }
};

kernels::QuantSource quant_source(const QuantMatrix& m) {
  kernels::QuantSource s;
  s.type = static_cast<kernels::QType>(m.type);  // same numbers as halo_quant_type
  s.group = static_cast<size_t>(m.group);
  s.rows = static_cast<size_t>(m.rows);
  s.values = m.values;
  s.scales = m.scales;
  s.offsets = m.offsets;
  s.scale_dtype = m.scale_dtype;
  return s;
}

// Parts of one format run as one segment: plain ones of any float dtype (the
// bf16 packer converts each), quantized ones of the same type and group.
bool same_format(const Part& a, const Part& b) {
  if (a.q == nullptr || b.q == nullptr) return a.q == nullptr && b.q == nullptr;
  return a.q->type == b.q->type && a.q->group == b.q->group;
}

// Builds the projections from the checkpoint's matrices, choosing each
// segment's kernel, and counts the weights by dtype for the KV dtype, the
// compute dtype and the log line.
struct LinearBuilder {
  const WeightSet& w;
  const QuantizedSet& qw;
  bool fast;
  std::string_view dtype;  // the option: auto, bfloat16 or float32
  bool use_onednn;
  size_t n16 = 0, nf16 = 0, nf32 = 0, packed_bytes = 0;
  // Quantized weights as given (values, scales, offsets), by type.
  size_t q_int8_bytes = 0, q_uint4_bytes = 0, q_packed_bytes = 0;
  bool any_bf16_matmul = false;  // some projection rounds its inputs to bf16 (v1.3 compute_dtype)
  bool any_int8_matmul = false;  // some projection runs gemm_q (inputs rounded to int8)

  // The reference path and dtype float32 run quantized weights dequantized to fp32.
  bool dequantize() const { return !fast || dtype == "float32"; }

  // One projection from checkpoint matrices fused along N.
  Linear operator()(std::initializer_list<std::pair<std::string, int64_t>> parts, int64_t K,
                    std::vector<float> bias) {
    Linear L;
    L.K = static_cast<size_t>(K);
    L.bias = std::move(bias);
    std::vector<Part> ps;
    for (const auto& [name, rows] : parts) ps.push_back(part(L, name, rows, K));
    for (size_t i = 0; i < ps.size();) {
      size_t j = i + 1;
      while (j < ps.size() && same_format(ps[i], ps[j])) ++j;
      L.segments.push_back(segment(ps.data() + i, j - i, L.K));
      L.segments.back().col = L.N;
      L.N += L.segments.back().n;
      i = j;
    }
    return L;
  }

  // A part: quantized when given so (validated against [rows, K]), else plain.
  Part part(Linear& L, const std::string& name, int64_t rows, int64_t K) {
    Part p;
    if (const QuantMatrix* q = qw.get(name, rows, K)) {
      (q->type == HALO_QUANT_INT8 ? q_int8_bytes : q_uint4_bytes) += q->bytes();
      if (!dequantize()) {
        p.q = q;
        return p;
      }
      // fp32 copy, owned by the projection: the reference matmul reads it in place.
      std::vector<float>& d = L.dequantized.emplace_back(static_cast<size_t>(rows * K));
      kernels::dequantize(quant_source(*q), static_cast<size_t>(K), d.data());
      p.plain = {d.data(), DType::F32, static_cast<size_t>(rows)};
      nf32 += static_cast<size_t>(rows * K);
      return p;
    }
    const Matrix m = w.get(name, {rows, K});
    p.plain = {m.data, m.dtype, static_cast<size_t>(rows)};
    (m.dtype == DType::F32   ? nf32
     : m.dtype == DType::F16 ? nf16
                             : n16) += static_cast<size_t>(rows * K);
    return p;
  }

  // n parts of one format as one segment, with its kernel.
  Linear::Segment segment(const Part* ps, size_t n, size_t K) {
    Linear::Segment g;
    for (size_t i = 0; i < n; ++i) g.n += ps[i].rows();
    if (ps[0].q != nullptr) {
      std::vector<kernels::QuantSource> src;
      for (size_t i = 0; i < n; ++i) src.push_back(quant_source(*ps[i].q));
      g.kind = Linear::Kind::kQuant;
      g.qpacked = kernels::PackedQWeight::pack(src, K);
      q_packed_bytes += g.qpacked.bytes();
      any_int8_matmul = true;
      return g;
    }
    for (size_t i = 0; i < n; ++i) g.parts.push_back(ps[i].plain);
    if (!fast) return g;
    const bool all_f32 =
        std::all_of(g.parts.begin(), g.parts.end(),
                    [](const kernels::WeightSource& p) { return p.dtype == DType::F32; });
    if (dtype == "float32" || (all_f32 && dtype == "auto")) {
      g.kind = Linear::Kind::kF32;  // fp32 activations; weights read in place
      return g;
    }
    any_bf16_matmul = true;
    if (use_onednn) {
#ifdef HALO_HAVE_ONEDNN
      g.kind = Linear::Kind::kOneDnn;
      g.dnnl = std::make_unique<onednn::Linear>(g.parts, K);
      packed_bytes += g.dnnl->weight_bytes();
#endif
    } else {
      g.kind = Linear::Kind::kPackedBf16;
      g.packed = kernels::PackedWeight::pack(g.parts, K);
      packed_bytes += g.packed.bytes();
    }
    return g;
  }
};

std::vector<float> concat(std::initializer_list<const std::vector<float>*> vs) {
  std::vector<float> out;
  for (const auto* v : vs) out.insert(out.end(), v->begin(), v->end());
  return out;
}

// Every weight, by its canonical name: the embedding, each layer's, the final
// norm and the LM head (the embedding when tied).
void load_weights(halo_executable& exe, const halo_model_spec& s, const WeightSet& w,
                  LinearBuilder& linear) {
  const int64_t V = s.vocab_size, H = s.hidden_size, I = s.intermediate_size;
  const int64_t NQ = int64_t{s.num_heads} * s.head_dim, NKV = int64_t{s.num_kv_heads} * s.head_dim;
  linear.qw.refuse_if_given(HALO_WEIGHT_EMBED_TOKENS);  // read by row, never quantized
  exe.embed = w.get(HALO_WEIGHT_EMBED_TOKENS, {V, H});
  exe.layer.resize(static_cast<size_t>(s.num_layers));
  for (int32_t i = 0; i < s.num_layers; ++i) {
    const std::string p = HALO_WEIGHT_LAYER_PREFIX + std::to_string(i) + ".";
    halo::cpu::Layer& L = exe.layer[static_cast<size_t>(i)];
    L.attn_norm = w.vec(p + HALO_WEIGHT_ATTN_NORM, H);
    std::vector<float> qkv_bias;
    if (s.flags & HALO_MODEL_QKV_BIAS) {
      const auto qb = w.vec(p + HALO_WEIGHT_Q_BIAS, NQ), kb = w.vec(p + HALO_WEIGHT_K_BIAS, NKV),
                 vb = w.vec(p + HALO_WEIGHT_V_BIAS, NKV);
      qkv_bias = concat({&qb, &kb, &vb});
    }
    L.qkv = linear({{p + HALO_WEIGHT_Q_PROJ, NQ},
                    {p + HALO_WEIGHT_K_PROJ, NKV},
                    {p + HALO_WEIGHT_V_PROJ, NKV}},
                   H, std::move(qkv_bias));
    if (s.flags & HALO_MODEL_QK_NORM) {
      L.q_norm = w.vec(p + HALO_WEIGHT_Q_NORM, s.head_dim);
      L.k_norm = w.vec(p + HALO_WEIGHT_K_NORM, s.head_dim);
    }
    L.o_proj = linear({{p + HALO_WEIGHT_O_PROJ, H}}, NQ, {});
    L.mlp_norm = w.vec(p + HALO_WEIGHT_MLP_NORM, H);
    L.gate_up = linear({{p + HALO_WEIGHT_GATE_PROJ, I}, {p + HALO_WEIGHT_UP_PROJ, I}}, H, {});
    L.down_proj = linear({{p + HALO_WEIGHT_DOWN_PROJ, H}}, I, {});
  }
  exe.final_norm = w.vec(HALO_WEIGHT_FINAL_NORM, H);
  // A quantized lm_head comes untied (the core unties it), so the tied head
  // is always the plain embedding.
  const bool tied = s.flags & HALO_MODEL_TIED_EMBEDDINGS;
  exe.lm_head_run = linear({{tied ? HALO_WEIGHT_EMBED_TOKENS : HALO_WEIGHT_LM_HEAD, V}}, H, {});
  linear.qw.check_all_used();
}

// KV cache type: auto is bf16 for 16-bit and quantized checkpoints on the fast
// path, else fp32.
int32_t choose_kv_dtype(halo_executable& exe, const halo_limits* lim, const LinearBuilder& lb) {
  const int32_t kv_asked = proposed_kv_dtype(lim);
  check_kv_dtype("cpu", kv_asked, {HALO_KV_DTYPE_FP32, HALO_KV_DTYPE_BF16});
  const bool quantized = lb.q_int8_bytes + lb.q_uint4_bytes > 0;
  const bool bf16_compute =
      exe.fast &&
      (lb.dtype == "bfloat16" || (lb.dtype == "auto" && (quantized || lb.n16 + lb.nf16 > lb.nf32)));
  const int32_t kv_agreed = kv_asked != HALO_KV_DTYPE_AUTO ? kv_asked
                            : bf16_compute                 ? HALO_KV_DTYPE_BF16
                                                           : HALO_KV_DTYPE_FP32;
  exe.kv_dtype = kv_agreed == HALO_KV_DTYPE_BF16 ? DType::BF16 : DType::F32;
  return kv_agreed;
}

// The quantized weights' part of the log line ("" for none).
std::string quantized_note(const halo_executable& exe, const LinearBuilder& lb) {
  if (lb.q_int8_bytes + lb.q_uint4_bytes == 0) return "";
  auto mb = [](size_t bytes) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f MB", 1e-6 * double(bytes));
    return std::string(b);
  };
  std::string types;
  if (lb.q_int8_bytes) types += mb(lb.q_int8_bytes) + " int8";
  if (lb.q_uint4_bytes) types += (types.empty() ? "" : ", ") + mb(lb.q_uint4_bytes) + " uint4";
  if (!lb.dequantize())
    return cat("; quantized weights (", types, "; ", mb(lb.q_packed_bytes), " packed) on the ",
               kernels::gemm_q_path(), " int8 GEMM");
  return cat("; quantized weights (", types, ") dequantized to fp32 at load",
             exe.fast ? " (dtype float32)" : "");
}

// One line on what runs, since the choice changes speed and numerics.
void log_what_runs(const halo_executable& exe, const CpuOptions& opt, const LinearBuilder& lb,
                   int threads, int32_t kv_agreed) {
  const std::string_view dtype = lb.dtype;
  const std::string quant = quantized_note(exe, lb);
  if (exe.fast) {
    const std::string_view path = kernels::gemm_bf16_path();  // amx, avx512-bf16 or generic
    const char* gemm = lb.use_onednn           ? "oneDNN bf16 matmul"
                       : path == "amx"         ? "amx-bf16 GEMM"
                       : path == "avx512-bf16" ? "avx512-bf16 GEMM"
                                               : "portable bf16 GEMM";
    std::fprintf(
        stderr,
        "halo cpu: fast kernels, %d threads, dtype %.*s: %s over %.0f MB of packed weights "
        "(%.0f MB bf16%s%s)%s%s; KV cache %s\n",
        threads, static_cast<int>(dtype.size()), dtype.data(), gemm, 1e-6 * double(lb.packed_bytes),
        2e-6 * double(lb.n16),
        lb.nf16 && dtype != "float32" ? ", fp16 converted to bf16 at load" : "",
        lb.nf32 && dtype == "bfloat16" ? ", fp32 converted to bf16 at load" : "",
        lb.nf32 && dtype != "bfloat16" ? "; fp32 weights kept fp32 (pass dtype bfloat16 to convert)"
        : dtype == "float32"           ? "; matmuls in fp32 (dtype float32)"
                                       : "",
        quant.c_str(), halo_kv_dtype_name(kv_agreed));
  } else {
    std::fprintf(stderr,
                 "halo cpu: reference kernels (%s=reference), fp32 compute%s; KV cache %s\n",
                 opt.kernels_source.c_str(), quant.c_str(), halo_kv_dtype_name(kv_agreed));
  }
}

// The limits: the asked ones (0 = default) agreed, the KV block size in bytes
// and the memory left for the KV cache.
void agree_limits(halo_executable& exe, halo_limits* lim, const halo_model_spec& s) {
  auto nonneg = [](const char* name, int32_t v) {
    if (v < 0) invalid("prepare: limits.", name, "=", v, " must not be negative (0 = default)");
  };
  nonneg("max_num_seqs", lim->max_num_seqs);
  nonneg("max_model_len", lim->max_model_len);
  nonneg("max_num_batched_tokens", lim->max_num_batched_tokens);
  nonneg("block_size", lim->block_size);
  const int64_t NKV = int64_t{s.num_kv_heads} * s.head_dim;
  exe.max_num_seqs = lim->max_num_seqs ? lim->max_num_seqs : 256;
  exe.max_model_len = lim->max_model_len ? lim->max_model_len : s.max_position_embeddings;
  exe.max_num_batched_tokens =
      lim->max_num_batched_tokens ? lim->max_num_batched_tokens : std::max(2048, exe.max_model_len);
  exe.block_size = lim->block_size ? lim->block_size : 16;
  exe.kv_bytes_per_block = 2ull * static_cast<uint64_t>(s.num_layers) *
                           static_cast<uint64_t>(exe.block_size) * static_cast<uint64_t>(NKV) *
                           kernels::dtype_size(exe.kv_dtype);
  const uint64_t avail = memory_available();
  const uint64_t margin = std::max<uint64_t>(avail / 10, 256ull << 20);

  lim->max_num_seqs = exe.max_num_seqs;
  lim->max_model_len = exe.max_model_len;
  lim->max_num_batched_tokens = exe.max_num_batched_tokens;
  lim->block_size = exe.block_size;
  lim->capabilities = HALO_CAP_CHUNKED_PREFILL | HALO_CAP_MIXED_BATCH;
  lim->kv_bytes_per_block = exe.kv_bytes_per_block;
  lim->kv_memory_available = avail > margin ? avail - margin : 0;
}

}  // namespace

void prepare(halo_prepare_args* args) {
  check_args("prepare", args, "prepare: args");
  if (args->device == nullptr) invalid("prepare: device is NULL");
  validate_spec(args->spec, "cpu");
  halo_limits* lim = args->limits;
  check_args("prepare", lim, "prepare: limits");
  const halo_model_spec& s = *args->spec;

  auto exe = std::make_unique<halo_executable>();
  exe->device = args->device->state;
  copy_spec(*exe, s);
  const CpuOptions opt = read_prepare_options(args);
  exe->fast = opt.kernels == "fast";
  const bool use_onednn = use_onednn_matmul(*exe, opt, args);

  const WeightSet w(args->weights, args->num_weights);
  const QuantizedSet qw(args, kQuantTypes, w);
  LinearBuilder linear{w, qw, exe->fast, opt.dtype, use_onednn};
  load_weights(*exe, s, w, linear);
  const int32_t kv_agreed = choose_kv_dtype(*exe, lim, linear);
  log_what_runs(*exe, opt, linear, args->device->threads, kv_agreed);
  agree_limits(*exe, lim, s);
  set_kv_dtype(lim, kv_agreed);
  set_spec_tokens(lim, proposed_spec_tokens(lim));  // any query count verifies
  // v1.6: the slots asked for, at most kMaxLoras (each filled slot holds its
  // adapters in fp32); any rank up to the proposal.
  const LoraProposal lp = proposed_lora(lim);
  const int32_t loras = std::min(lp.max_loras, kMaxLoras);
  exe->lora.configure(loras, loras > 0 ? lp.max_lora_rank : 0,
                      {s.num_layers, s.hidden_size, s.intermediate_size, s.num_heads * s.head_dim,
                       s.num_kv_heads * s.head_dim});
  set_lora_limits(lim, exe->lora.max_loras(), exe->lora.max_rank());
  // The narrowest type an activation is rounded to: int8 as soon as one
  // projection runs gemm_q, else bf16 as soon as one runs the bf16 GEMM; the
  // reference kernels and fp32 projections keep fp32 activations (16-bit
  // weights widen exactly, quantized ones are dequantized to fp32).
  set_compute_dtype(lim, linear.any_int8_matmul   ? HALO_COMPUTE_DTYPE_INT8
                         : linear.any_bf16_matmul ? HALO_COMPUTE_DTYPE_BF16
                                                  : HALO_COMPUTE_DTYPE_FP32);
  args->executable = exe.release();
}

void kv_cache_create(halo_kv_cache_create_args* args) {
  check_args("kv_cache_create", args, "kv_cache_create: args");
  const halo_executable* exe = args->executable;
  if (exe == nullptr) invalid("kv_cache_create: executable is NULL");
  if (args->num_blocks <= 0)
    invalid("kv_cache_create: num_blocks=", args->num_blocks, " must be positive");
  if (args->block_size != exe->block_size)
    invalid("kv_cache_create: block_size=", args->block_size,
            " does not match the prepared block_size=", exe->block_size);
  const size_t block_bytes =
      static_cast<size_t>(exe->block_size) * static_cast<size_t>(exe->kv_heads) *
      static_cast<size_t>(exe->head_dim) * kernels::dtype_size(exe->kv_dtype);
  const uint64_t total = exe->kv_bytes_per_block * static_cast<uint64_t>(args->num_blocks);
  const uint64_t phys = host_info().memory_total;
  if (phys > 0 && total > phys)
    fail(HALO_STATUS_OUT_OF_MEMORY, "kv_cache_create: num_blocks=", args->num_blocks, " needs ",
         total, " bytes, more than the host's ", phys, " bytes of memory");
  auto kv = std::make_unique<halo_kv_cache>();
  kv->owner = exe;
  kv->num_blocks = args->num_blocks;
  kv->block_size = exe->block_size;
  kv->dtype = exe->kv_dtype;
  kv->block_bytes = block_bytes;
  const size_t n = block_bytes * static_cast<size_t>(args->num_blocks);
  for (int32_t l = 0; l < exe->layers; ++l) {
    for (auto* vec : {&kv->k, &kv->v}) {
      // calloc: zeroed pages are mapped lazily, so a large cache costs nothing until used.
      ByteArray a(static_cast<char*>(std::calloc(n, 1)));
      if (!a)
        fail(HALO_STATUS_OUT_OF_MEMORY, "kv_cache_create: cannot allocate ", n, " bytes for layer ",
             l, " (num_blocks=", args->num_blocks, ")");
      vec->push_back(std::move(a));
    }
  }
  args->kv_cache = kv.release();
}

void kv_cache_copy_blocks(halo_kv_cache_copy_blocks_args* args) {
  check_args("kv_cache_copy_blocks", args, "kv_cache_copy_blocks: args");
  halo_kv_cache* kv = args->kv_cache;
  if (kv == nullptr) invalid("kv_cache_copy_blocks: kv_cache is NULL");
  if (!validate_copy_blocks(args, kv->num_blocks)) return;
  const size_t bb = kv->block_bytes;
  for (size_t l = 0; l < kv->k.size(); ++l) {
    for (char* base : {kv->k[l].get(), kv->v[l].get()}) {
      for (int32_t i = 0; i < args->num_pairs; ++i) {
        std::memcpy(base + static_cast<size_t>(args->dst_blocks[i]) * bb,
                    base + static_cast<size_t>(args->src_blocks[i]) * bb, bb);
      }
    }
  }
}

void execute(halo_execute_args* a) {
  check_args("execute", a, "execute: args");
  halo_executable* exe = a->executable;
  const halo_kv_cache* kv = a->kv_cache;
  if (exe == nullptr) invalid("execute: executable is NULL");
  if (kv == nullptr) invalid("execute: kv_cache is NULL");
  if (kv->owner != exe) invalid("execute: kv_cache was created for a different executable");
  const ExecLimits lim{exe->vocab,
                       exe->max_num_seqs,
                       exe->max_model_len,
                       exe->max_num_batched_tokens,
                       exe->block_size,
                       exe->hidden,
                       exe->lora.max_loras(),
                       "this executable was prepared with max_loras=0 (no adapter slots)"};
  const KvLimits kvl{kv->num_blocks, kv->block_size};
  validate_execute(a, &lim, &kvl);

  std::lock_guard<std::mutex> lock(exe->device->exec_mu);
  exe->lora.begin_step(*a);
  if (exe->fast)
    forward_fast(*exe, *kv, *a);
  else
    forward_reference(*exe, *kv, *a);
}

// v1.6: fills or empties a LoRA slot; validated in full before the slot changes.
void lora_slot_set(halo_lora_slot_args* args) {
  check_args("lora_slot_set", args, "lora_slot_set: args");
  halo_executable* exe = args->executable;
  if (exe == nullptr) invalid("lora_slot_set: executable is NULL");
  std::lock_guard<std::mutex> lock(exe->device->exec_mu);  // the slots execute reads
  exe->lora.set(args);
}

}  // namespace halo::cpu
