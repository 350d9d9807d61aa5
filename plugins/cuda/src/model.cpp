// prepare / kv_cache / execute of the CUDA plugin: weights upload, the
// per-layer launch sequence, decode and verify CUDA graphs (their shapes and
// the step packing: step_plan.h) and NCCL tensor parallelism.
#include "model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <utility>

#include "errors.h"
#include "launch.h"
#include "quant_upload.h"
#include "step_plan.h"

namespace halo::cuda {

// ------------------------------------------------------------------ basics

int visible_devices(const char* where) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess && n > 0) return n;
  int driver = 0;
  (void)cudaDriverGetVersion(&driver);
  const char* reason = driver == 0                      ? "driver not found"
                       : e == cudaErrorInsufficientDriver ? "driver too old for this CUDA runtime"
                                                          : "no CUDA-capable GPU visible";
  if (e == cudaSuccess)
    fail(HALO_STATUS_FAILED_PRECONDITION, where, ": cuda: no device (", reason, "): cudaGetDeviceCount returned 0");
  fail(HALO_STATUS_FAILED_PRECONDITION, where, ": cuda: no device (", reason, "): cudaGetDeviceCount: ",
       cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

namespace {

void check_blas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    fail(s == CUBLAS_STATUS_ALLOC_FAILED ? HALO_STATUS_OUT_OF_MEMORY : HALO_STATUS_INTERNAL, what, ": cuBLAS ",
         cublasGetStatusName(s), " (", cublasGetStatusString(s), ")");
}

#if HALO_CUDA_HAVE_NCCL
void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) fail(HALO_STATUS_INTERNAL, what, ": NCCL: ", ncclGetErrorString(r));
}
#endif

std::atomic<uint64_t> g_kv_ids{0};

}  // namespace

DeviceState::~DeviceState() {
#if HALO_CUDA_HAVE_NCCL
  for (ncclComm_t c : comms) ncclCommDestroy(c);
#endif
}

void* Rank::alloc(size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 16));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail(HALO_STATUS_OUT_OF_MEMORY, "cannot allocate ", bytes, " bytes on GPU ", device, ": ", cudaGetErrorString(e));
  }
  allocs.push_back(p);
  return p;
}

void Rank::drop_graphs() {
  for (auto& [b, g] : graphs) cudaGraphExecDestroy(g);
  graphs.clear();
}

Rank::~Rank() {
  cudaSetDevice(device);
  if (stream) cudaStreamSynchronize(stream);
  drop_graphs();
  if (blas) cublasDestroy(blas);
  for (void* p : allocs) cudaFree(p);
  if (stream) cudaStreamDestroy(stream);
}

}  // namespace halo::cuda

halo_executable::~halo_executable() {
  ranks.clear();
  if (host_inputs) cudaFreeHost(host_inputs);
  if (host_hidden) cudaFreeHost(host_hidden);
}

halo_kv_cache::~halo_kv_cache() {
  for (size_t r = 0; r < base.size(); ++r) {
    if (!base[r]) continue;
    cudaSetDevice(owner->ranks[r]->device);
    cudaFree(base[r]);
  }
}

halo_buffer::~halo_buffer() {
  if (data) {
    cudaSetDevice(device);
    cudaFree(data);
  }
}

namespace halo::cuda {
namespace {

using kernels::DType;

// ----------------------------------------------------------------- weights

// Appends rows [r0, r1) x columns [c0, c1) of a host [*, cols] matrix,
// converted to the 16-bit type dt, to out.
void convert_block(const Matrix& m, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1, Dt dt,
                   std::vector<uint16_t>& out) {
  const size_t es = kernels::dtype_size(m.dtype);
  const size_t n = static_cast<size_t>(c1 - c0);
  const bool same = (dt == Dt::BF16 && m.dtype == DType::BF16) || (dt == Dt::F16 && m.dtype == DType::F16);
  std::vector<float> row(n);
  for (int64_t r = r0; r < r1; ++r) {
    const char* src = static_cast<const char*>(m.data) + (static_cast<size_t>(r) * static_cast<size_t>(cols) + static_cast<size_t>(c0)) * es;
    const size_t at = out.size();
    out.resize(at + n);
    if (same) {
      std::memcpy(out.data() + at, src, n * 2);
      continue;
    }
    kernels::to_f32(src, m.dtype, row.data(), n);
    for (size_t i = 0; i < n; ++i) out[at + i] = dt == Dt::BF16 ? kernels::f32_to_bf16(row[i]) : kernels::f32_to_f16(row[i]);
  }
}

template <class T>
T* upload(Rank& r, const std::vector<T>& host) {
  auto* p = static_cast<T*>(r.alloc(host.size() * sizeof(T)));
  check_cuda(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "prepare: cudaMemcpy");
  return p;
}

struct HostLayer {
  HostProj q, k, v, o, gate, up, down;
  std::vector<float> attn_norm, mlp_norm, q_bias, k_bias, v_bias, q_norm, k_norm;
};

// ------------------------------------------------------------- the forward

template <class T>
struct Forward {
  const halo_executable& e;
  const halo_kv_cache& kv;
  const Layout& y;

  int heads_l() const { return e.heads / e.tp; }
  int kvh_l() const { return e.kv_heads / e.tp; }
  int inter_l() const { return e.inter / e.tp; }

  // out[M, N] = x[M, K] w^T, fp32 out: cuBLAS for a 16-bit w, the
  // quantized kernels (GEMV for a decode-sized M, tiles otherwise) for a
  // quantized one.
  void gemm(Rank& r, const void* x, int M, int K, const Proj& w, int N, float* out) const {
    if (M == 0) return;
    if (w.qtype == HALO_QUANT_INT8)
      return qgemm<k::QuantGemvInt8<T>, k::QuantTiledInt8<T>>(r, x, M, K, w, N, out);
    if (w.qtype == HALO_QUANT_UINT4)
      return qgemm<k::QuantGemvUint4<T>, k::QuantTiledUint4<T>>(r, x, M, K, w, N, out);
    const float alpha = 1.f, beta = 0.f;
    const cudaDataType_t t = e.dt == Dt::BF16 ? CUDA_R_16BF : CUDA_R_16F;
    // Row-major out[M, N] = x[M, K] w[N, K]^T is column-major out^T = w^T' x^T'.
    check_blas(cublasGemmEx(r.blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, w.w16, t, K, x, t, K,
                            &beta, out, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "execute: cublasGemmEx");
  }

  template <class K>
  void run(const typename K::Params& p, k::Dim3 grid, int threads, size_t smem_floats, cudaStream_t s) const {
    check_cuda(launch<K>(p, grid, threads, smem_floats * sizeof(float), s), "execute: kernel launch");
  }

  template <class Gemv, class Tiled>
  void qgemm(Rank& r, const void* x, int M, int K, const Proj& w, int N, float* out) const {
    const T* xt = static_cast<const T*>(x);
    if (M <= k::kQuantGemvMaxM) {
      const int nt = 128;  // 4 output rows a block, 32 threads each
      run<Gemv>({xt, w.q, out, M, N, K}, {k::ceil_div(N, nt / 32), 1, 1}, nt, Gemv::smem_floats(nt),
                r.stream);
    } else {
      run<Tiled>({xt, w.q, out, M, N, K}, {k::ceil_div(N, Tiled::BN), k::ceil_div(M, Tiled::BM), 1},
                 Tiled::kThreads, Tiled::smem_floats(), r.stream);
    }
  }

  // v1.6: the step's LoRA update of a projection (one, or the fused q|k|v /
  // gate|up) whose GEMM just wrote out[T, ldy]: shrink x [T, K] into xa,
  // expand into out at each projection's columns (kernels/lora.cuh).
  struct LoraTarget {
    int proj, col0, out;
  };
  void lora(Rank& r, int l, const void* x, int K, float* out, int ldy,
            std::initializer_list<LoraTarget> targets) const {
    if (y.lora_tiles == 0) return;
    char* in = r.inputs;
    const k::LoraTiles tiles{at<int32_t>(in, y.l_slot), at<int32_t>(in, y.l_start),
                             at<int32_t>(in, y.l_count), at<int32_t>(in, y.l_rows)};
    const int R = e.max_lora_rank, ld = k::kLoraMaxFused * R;
    typename k::LoraShrink<T>::Params sp{
        static_cast<const T*>(x), K, {}, 0, tiles, r.lora_xa, ld, R};
    k::LoraExpand::Params ep{r.lora_xa, ld, R, {}, {}, {}, 0, tiles, out, ldy};
    int max_out = 0;
    for (const LoraTarget& t : targets) {
      const k::LoraMat<k::bf16>* mats =
          r.lora_table +
          (static_cast<size_t>(l) * plugin::kNumLoraProj + static_cast<size_t>(t.proj)) *
              static_cast<size_t>(e.max_loras);
      sp.mats[sp.nproj++] = mats;
      ep.mats[ep.nproj] = mats, ep.col0[ep.nproj] = t.col0, ep.out[ep.nproj] = t.out, ++ep.nproj;
      max_out = std::max(max_out, t.out);
    }
    const int st = 128, et = 256;
    run<k::LoraShrink<T>>(sp, {y.lora_tiles, k::ceil_div(R, st / 32), sp.nproj}, st,
                          k::LoraShrink<T>::smem_floats(st), r.stream);
    run<k::LoraExpand>(ep, {y.lora_tiles, k::ceil_div(max_out, et), ep.nproj}, et,
                       k::LoraExpand::smem_floats(R), r.stream);
  }

  void attention_part(size_t ri, int l) const {
    Rank& r = *e.ranks[ri];
    const LayerW& W = r.layer[static_cast<size_t>(l)];
    const int H = e.hidden, D = e.head_dim, nh = heads_l(), nkv = kvh_l();
    const int qkv_n = (nh + 2 * nkv) * D;
    cudaStream_t st = r.stream;
    char* in = r.inputs;
    if (l == 0)
      run<k::EmbedKernel<T>>({at<int32_t>(in, y.tok), static_cast<const T*>(r.embed), r.x, H}, {y.T, 1, 1}, 256, 0, st);
    run<k::RmsNormKernel<T>>({r.x, l == 0 ? nullptr : r.delta, nullptr, W.attn_norm, static_cast<T*>(r.h), H, e.eps, true},
                             {y.T, 1, 1}, 256, 256, st);
    gemm(r, r.h, y.T, H, W.qkv, qkv_n, r.qkv);
    lora(r, l, r.h, H, r.qkv, qkv_n,
         {{plugin::kLoraQ, 0, nh * D},
          {plugin::kLoraK, nh * D, nkv * D},
          {plugin::kLoraV, (nh + nkv) * D, nkv * D}});
    T* kc = static_cast<T*>(kv.base[ri]) + static_cast<size_t>(2 * l) * kv.array_elems;
    T* vc = kc + kv.array_elems;
    run<k::RopeKvKernel<T>>({r.qkv, qkv_n, W.qkv_bias, W.q_norm, W.k_norm, at<int32_t>(in, y.pos),
                             at<int64_t>(in, y.slots), r.inv_freq, kc, vc, nh, nkv, D, e.eps},
                            {y.T, 1, 1}, 128, static_cast<size_t>(nh + nkv), st);
    k::AttnShape s;
    s.heads = nh, s.kv_heads = nkv, s.head_dim = D, s.block_size = e.block_size;
    s.scale = 1.0f / std::sqrt(static_cast<float>(D));
    const int G = nh / nkv;
    if (y.items > 0) {
      const int nt = std::max(128, (G + 31) / 32 * 32);
      typename k::DecodeAttnKernel<T>::Params p{s, r.qkv, qkv_n, kc, vc, at<int32_t>(in, y.it_tok),
                                                at<int32_t>(in, y.it_ctx), at<int32_t>(in, y.it_row),
                                                at<int32_t>(in, y.bt), y.mb, e.part_size, e.max_parts,
                                                static_cast<T*>(r.attn), r.tmp_out, r.tmp_ml};
      run<k::DecodeAttnKernel<T>>(p, {y.items, nkv, e.max_parts}, nt,
                                  k::DecodeAttnKernel<T>::smem_floats(s, e.part_size, nt), st);
      if (e.max_parts > 1)
        run<k::DecodeReduceKernel<T>>({s, at<int32_t>(in, y.it_tok), at<int32_t>(in, y.it_ctx), e.part_size,
                                       e.max_parts, r.tmp_out, r.tmp_ml, static_cast<T*>(r.attn)},
                                      {y.items, nh, 1}, 128, 0, st);
    }
    if (y.tiles > 0) {
      typename k::PrefillAttnKernel<T>::Params p{s, r.qkv, qkv_n, kc, vc, at<int32_t>(in, y.t_tok0),
                                                 at<int32_t>(in, y.t_nq), at<int32_t>(in, y.t_c0),
                                                 at<int32_t>(in, y.t_row), at<int32_t>(in, y.bt), y.mb,
                                                 e.q_tile, e.kv_tile, static_cast<T*>(r.attn)};
      run<k::PrefillAttnKernel<T>>(p, {y.tiles, nkv, 1}, 128,
                                   k::PrefillAttnKernel<T>::smem_floats(s, e.q_tile, e.kv_tile), st);
    }
    gemm(r, r.attn, y.T, nh * D, W.o, H, r.delta);
    lora(r, l, r.attn, nh * D, r.delta, H, {{plugin::kLoraO, 0, H}});
  }

  void mlp_part(size_t ri, int l) const {
    Rank& r = *e.ranks[ri];
    const LayerW& W = r.layer[static_cast<size_t>(l)];
    const int H = e.hidden, I = inter_l();
    run<k::RmsNormKernel<T>>({r.x, r.delta, nullptr, W.mlp_norm, static_cast<T*>(r.h), H, e.eps, true}, {y.T, 1, 1},
                             256, 256, r.stream);
    gemm(r, r.h, y.T, H, W.gate_up, 2 * I, r.gu);
    lora(r, l, r.h, H, r.gu, 2 * I, {{plugin::kLoraGate, 0, I}, {plugin::kLoraUp, I, I}});
    const int64_t total = int64_t{y.T} * I;
    const int blocks = static_cast<int>(std::min<int64_t>((total + 255) / 256, 65535));
    run<k::GatedActKernel<T>>({r.gu, static_cast<T*>(r.act), y.T, I, e.activation == HALO_ACTIVATION_GELU_TANH},
                              {blocks, 1, 1}, 256, 0, r.stream);
    gemm(r, r.act, y.T, I, W.down, H, r.delta);
    lora(r, l, r.act, I, r.delta, H, {{plugin::kLoraDown, 0, H}});
  }

  // Final norm of logits rows [c0, c0 + n) and the lm_head GEMM (rank 0).
  void logits_part(int c0, int n) const {
    Rank& r = *e.ranks[0];
    run<k::RmsNormKernel<T>>({r.x, r.delta, at<int32_t>(r.inputs, y.lidx) + c0, r.final_norm, static_cast<T*>(r.hf),
                              e.hidden, e.eps, false},
                             {n, 1, 1}, 256, 256, r.stream);
    gemm(r, r.hf, n, e.hidden, r.lm_head, e.vocab, r.logits);
  }

  void allreduce() const {
    if (e.tp == 1) return;
#if HALO_CUDA_HAVE_NCCL
    const auto& comms = e.device->comms;
    check_nccl(ncclGroupStart(), "execute: ncclGroupStart");
    for (size_t ri = 0; ri < e.ranks.size(); ++ri) {
      Rank& r = *e.ranks[ri];
      check_nccl(ncclAllReduce(r.delta, r.delta, static_cast<size_t>(y.T) * e.hidden, ncclFloat, ncclSum, comms[ri],
                               r.stream),
                 "execute: ncclAllReduce");
    }
    check_nccl(ncclGroupEnd(), "execute: ncclGroupEnd");
#else
    fail(HALO_STATUS_UNIMPLEMENTED, "execute: tensor parallelism needs NCCL, which this build does not have");
#endif
  }

  void set(size_t ri) const {
    if (e.tp > 1) check_cuda(cudaSetDevice(e.ranks[ri]->device), "execute: cudaSetDevice");
  }

  void layers() const {
    for (int l = 0; l < e.layers; ++l) {
      for (size_t ri = 0; ri < e.ranks.size(); ++ri) set(ri), attention_part(ri, l);
      allreduce();
      for (size_t ri = 0; ri < e.ranks.size(); ++ri) set(ri), mlp_part(ri, l);
      allreduce();
    }
    set(0);
  }
};

// Grows the pinned host buffer and every rank's input buffer to hold layout
// y (growing a device buffer moves it: captured graphs are dropped).
void ensure_input_capacity(halo_executable* exe, const Layout& y) {
  if (y.bytes > exe->host_inputs_cap) {
    if (exe->host_inputs) cudaFreeHost(exe->host_inputs);
    exe->host_inputs = nullptr;
    exe->host_inputs_cap = 0;
    check_cuda(cudaHostAlloc(reinterpret_cast<void**>(&exe->host_inputs), y.bytes * 2, cudaHostAllocPortable),
               "execute: cudaHostAlloc");
    exe->host_inputs_cap = y.bytes * 2;
  }
  for (auto& r : exe->ranks) {
    if (y.bytes <= r->inputs_cap) continue;
    check_cuda(cudaSetDevice(r->device), "execute: cudaSetDevice");
    r->drop_graphs();
    r->inputs = static_cast<char*>(r->alloc(y.bytes * 2));  // the old one is freed with the rank
    r->inputs_cap = y.bytes * 2;
  }
}

// Where a step's outputs go on the host: the caller's logits and (v1.5,
// when asked) its hidden_states, whose 16-bit rows are staged in the pinned
// exe->host_hidden until the step has finished.
struct StepOut {
  float* logits = nullptr;
  DLTensor* hidden = nullptr;
};

StepOut step_out(halo_execute_args* a, halo_executable* exe) {
  StepOut o;
  if (a->num_logits == 0) return o;
  o.logits = reinterpret_cast<float*>(static_cast<char*>(a->logits->data) + a->logits->byte_offset);
  o.hidden = hidden_states_out(a);
  const size_t bytes = static_cast<size_t>(a->num_logits) * static_cast<size_t>(exe->hidden) * 2;
  if (o.hidden && bytes > exe->host_hidden_cap) {
    if (exe->host_hidden) cudaFreeHost(exe->host_hidden);
    exe->host_hidden = nullptr;
    exe->host_hidden_cap = 0;
    check_cuda(cudaHostAlloc(reinterpret_cast<void**>(&exe->host_hidden), bytes * 2,
                             cudaHostAllocPortable),
               "execute: cudaHostAlloc (hidden states)");
    exe->host_hidden_cap = bytes * 2;
  }
  return o;
}

// Queues the copies of logits rows [c, c + n) (and their final-normed hidden
// rows, the lm_head's input) from rank 0's buffers, which hold them from row 0.
void copy_rows_out(const halo_executable* exe, const StepOut& o, int c, int n) {
  Rank& r0 = *exe->ranks[0];
  const size_t V = static_cast<size_t>(exe->vocab), H = static_cast<size_t>(exe->hidden);
  const size_t c0 = static_cast<size_t>(c), rows = static_cast<size_t>(n);
  check_cuda(cudaMemcpyAsync(o.logits + c0 * V, r0.logits, rows * V * 4, cudaMemcpyDeviceToHost,
                             r0.stream),
             "execute: cudaMemcpyAsync (logits)");
  if (o.hidden)
    check_cuda(cudaMemcpyAsync(exe->host_hidden + c0 * H * 2, r0.hf, rows * H * 2,
                               cudaMemcpyDeviceToHost, r0.stream),
               "execute: cudaMemcpyAsync (hidden states)");
}

// A graph step (decode or verify, step_plan.h): its graph captured on first
// use (per KV cache: the graph holds its pointers), then launched; the
// caller's L rows copied out.
template <class T>
void run_graph_step(halo_executable* exe, const halo_kv_cache* kv, const Forward<T>& f,
                    const GraphShape& gs, int L, const StepOut& o) {
  Rank& r0 = *exe->ranks[0];
  if (r0.graph_kv_id != kv->id) {
    r0.drop_graphs();
    r0.graph_kv_id = kv->id;
  }
  auto it = r0.graphs.find(gs);
  if (it == r0.graphs.end()) {
    check_cuda(cudaStreamBeginCapture(r0.stream, cudaStreamCaptureModeRelaxed),
               "execute: cudaStreamBeginCapture");
    cudaGraph_t g = nullptr;
    try {
      f.layers();
      f.logits_part(0, gs.rows());
    } catch (...) {
      cudaStreamEndCapture(r0.stream, &g);
      if (g) cudaGraphDestroy(g);
      throw;
    }
    check_cuda(cudaStreamEndCapture(r0.stream, &g), "execute: cudaStreamEndCapture");
    cudaGraphExec_t ge = nullptr;
    const cudaError_t ie = cudaGraphInstantiate(&ge, g, 0);
    cudaGraphDestroy(g);
    check_cuda(ie, "execute: cudaGraphInstantiate");
    it = r0.graphs.emplace(gs, ge).first;
  }
  check_cuda(cudaGraphLaunch(it->second, r0.stream), "execute: cudaGraphLaunch");
  if (L > 0) copy_rows_out(exe, o, 0, L);
}

template <class T>
void execute_t(halo_execute_args* a, halo_executable* exe, const halo_kv_cache* kv) {
  const int L = a->num_logits;
  const uint8_t* filled = exe->lora_filled.data();
  const int nl = exe->max_loras, tr = k::kLoraTileRows;
  const GraphShape gs = graph_shape(
      a, {exe->device->graphs && exe->tp == 1, exe->max_graph_batch, exe->spec_tokens, filled, nl});
  const StepItems w = gs ? StepItems{} : collect_items(a, exe->q_tile);
  const LoraPlan lp = gs ? LoraPlan{} : eager_lora(a, filled, nl, tr);
  const int mb_cap = (exe->max_model_len + exe->block_size - 1) / exe->block_size;
  const Layout y = gs ? graph_layout(gs, mb_cap, nl, tr) : eager_layout(a, w, &lp);
  ensure_input_capacity(exe, y);
  if (gs)
    pack_graph_inputs(a, exe->block_size, gs, y, exe->host_inputs, filled, nl, tr);
  else
    pack_eager_inputs(a, w, y, exe->host_inputs, &lp);
  for (auto& r : exe->ranks) {
    check_cuda(cudaSetDevice(r->device), "execute: cudaSetDevice");
    check_cuda(
        cudaMemcpyAsync(r->inputs, exe->host_inputs, y.bytes, cudaMemcpyHostToDevice, r->stream),
        "execute: cudaMemcpyAsync");
  }
  check_cuda(cudaSetDevice(exe->ranks[0]->device), "execute: cudaSetDevice");
  const Forward<T> f{*exe, *kv, y};
  const StepOut o = step_out(a, exe);
  if (gs) {
    run_graph_step(exe, kv, f, gs, L, o);
  } else {
    f.layers();
    for (int c = 0; c < L; c += exe->logits_chunk) {
      const int n = std::min(exe->logits_chunk, L - c);
      f.logits_part(c, n);
      copy_rows_out(exe, o, c, n);
    }
  }
  for (auto& r : exe->ranks) {
    check_cuda(cudaSetDevice(r->device), "execute: cudaSetDevice");
    check_cuda(cudaStreamSynchronize(r->stream), "execute: step failed on the GPU");
  }
  if (o.hidden)
    kernels::to_f32(
        exe->host_hidden, exe->dt == Dt::BF16 ? DType::BF16 : DType::F16,
        reinterpret_cast<float*>(static_cast<char*>(o.hidden->data) + o.hidden->byte_offset),
        static_cast<size_t>(L) * static_cast<size_t>(exe->hidden));
}

}  // namespace

// ----------------------------------------------------------------- prepare

namespace {

// The spec's shapes, copied into the executable.
void copy_spec(halo_executable& exe, const halo_model_spec& s) {
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
}

// The checkpoint's weights on the host, before conversion and sharding.
struct HostWeights {
  Matrix embed;
  HostProj lm_head;
  std::vector<HostLayer> layers;
  std::vector<float> final_norm;
  bool tied = false;
};

// A projection [rows, cols], quantized when prepare gave it so.
HostProj read_proj(const WeightSet& w, const QuantizedSet& qs, const std::string& name,
                   int64_t rows, int64_t cols) {
  HostProj p;
  p.name = name;
  if (const QuantMatrix* q = qs.get(name, rows, cols))
    p.q = *q;
  else
    p.m = w.get(name, {rows, cols});
  return p;
}

// Every weight by its canonical name (validated exactly as the CPU plugin does).
HostWeights read_weights(const WeightSet& w, const QuantizedSet& qs, const halo_model_spec& s) {
  const int64_t V = s.vocab_size, H = s.hidden_size, I = s.intermediate_size;
  const int64_t NQ = int64_t{s.num_heads} * s.head_dim, NKV = int64_t{s.num_kv_heads} * s.head_dim;
  HostWeights hw;
  hw.embed = w.get(HALO_WEIGHT_EMBED_TOKENS, {V, H});
  hw.layers.resize(static_cast<size_t>(s.num_layers));
  for (int32_t i = 0; i < s.num_layers; ++i) {
    const std::string p = HALO_WEIGHT_LAYER_PREFIX + std::to_string(i) + ".";
    HostLayer& L = hw.layers[static_cast<size_t>(i)];
    L.attn_norm = w.vec(p + HALO_WEIGHT_ATTN_NORM, H);
    L.q = read_proj(w, qs, p + HALO_WEIGHT_Q_PROJ, NQ, H);
    L.k = read_proj(w, qs, p + HALO_WEIGHT_K_PROJ, NKV, H);
    L.v = read_proj(w, qs, p + HALO_WEIGHT_V_PROJ, NKV, H);
    if (s.flags & HALO_MODEL_QKV_BIAS) {
      L.q_bias = w.vec(p + HALO_WEIGHT_Q_BIAS, NQ);
      L.k_bias = w.vec(p + HALO_WEIGHT_K_BIAS, NKV);
      L.v_bias = w.vec(p + HALO_WEIGHT_V_BIAS, NKV);
    }
    if (s.flags & HALO_MODEL_QK_NORM) {
      L.q_norm = w.vec(p + HALO_WEIGHT_Q_NORM, s.head_dim);
      L.k_norm = w.vec(p + HALO_WEIGHT_K_NORM, s.head_dim);
    }
    L.o = read_proj(w, qs, p + HALO_WEIGHT_O_PROJ, H, NQ);
    L.mlp_norm = w.vec(p + HALO_WEIGHT_MLP_NORM, H);
    L.gate = read_proj(w, qs, p + HALO_WEIGHT_GATE_PROJ, I, H);
    L.up = read_proj(w, qs, p + HALO_WEIGHT_UP_PROJ, I, H);
    L.down = read_proj(w, qs, p + HALO_WEIGHT_DOWN_PROJ, H, I);
  }
  hw.final_norm = w.vec(HALO_WEIGHT_FINAL_NORM, H);
  hw.tied = s.flags & HALO_MODEL_TIED_EMBEDDINGS;
  if (hw.tied)
    hw.lm_head.name = HALO_WEIGHT_EMBED_TOKENS, hw.lm_head.m = hw.embed;
  else
    hw.lm_head = read_proj(w, qs, HALO_WEIGHT_LM_HEAD, V, H);
  return hw;
}

// Compute type: the checkpoint's 16-bit type (bf16 wins a mix); fp32 -> bf16.
// The KV cache is stored in the compute type.
void choose_compute_dtype(halo_executable& exe, const HostWeights& hw, const halo_limits* lim) {
  bool any_bf16 = false, any_f16 = false, any_f32 = false;
  auto see_m = [&](const Matrix& m) {
    any_bf16 |= m.dtype == DType::BF16, any_f16 |= m.dtype == DType::F16, any_f32 |= m.dtype == DType::F32;
  };
  auto see = [&](const HostProj& p) {
    if (!p.quantized()) see_m(p.m);  // quantized weights are dequantized in fp32, never rounded
  };
  see_m(hw.embed), see(hw.lm_head);
  for (const auto& L : hw.layers)
    see(L.q), see(L.k), see(L.v), see(L.o), see(L.gate), see(L.up), see(L.down);
  exe.dt = any_bf16 || !any_f16 ? Dt::BF16 : Dt::F16;
  if (any_f32)
    std::fprintf(stderr,
                 "halo cuda: fp32 weights are converted to %s on upload (GEMMs run in 16-bit with "
                 "fp32 accumulation)\n",
                 exe.dt == Dt::BF16 ? "bf16" : "fp16");
  check_kv_dtype("cuda", proposed_kv_dtype(lim),
                 {exe.dt == Dt::BF16 ? HALO_KV_DTYPE_BF16 : HALO_KV_DTYPE_FP16});
}

constexpr int32_t kMaxLoras = 256, kMaxLoraRank = 512;

// Limits (as the CPU plugin; block size 16 by default).
void agree_limits(halo_executable& exe, const halo_limits* lim, const halo_model_spec& s) {
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
                           static_cast<uint64_t>(exe.block_size) * static_cast<uint64_t>(NKV) * 2u;
  exe.lim =
      ExecLimits{exe.vocab,      exe.max_num_seqs, exe.max_model_len, exe.max_num_batched_tokens,
                 exe.block_size, exe.hidden};
  // Any query count runs (eagerly, or in a verify graph): the proposal stands.
  exe.spec_tokens = proposed_spec_tokens(lim);
  // v1.6: the proposed LoRA slots, up to kMaxLoras of rank up to kMaxLoraRank
  // (the expand kernel keeps a tile's xa in shared memory).
  const LoraProposal lp = proposed_lora(lim);
  exe.max_loras = lp.max_lora_rank > 0 ? std::min(lp.max_loras, kMaxLoras) : 0;
  exe.max_lora_rank = exe.max_loras > 0 ? std::min(lp.max_lora_rank, kMaxLoraRank) : 0;
  exe.lora_filled.assign(static_cast<size_t>(exe.max_loras), 0);
  exe.lim.max_loras = exe.max_loras;
}

// Kernel tiling: the attention tiles halved until they fit the GPU's shared
// memory per block; refuses a head shape that never fits.
void choose_tiling(halo_executable& exe, const halo_model_spec& s, int tp, int ordinal) {
  const int G = s.num_heads / s.num_kv_heads;
  const int D = s.head_dim;
  exe.part_size = 512;
  exe.max_parts = (exe.max_model_len + exe.part_size - 1) / exe.part_size;
  exe.q_tile = std::max(1, 32 / G);
  exe.kv_tile = 16;
  exe.logits_chunk = 256;
  exe.max_graph_batch = std::min({exe.max_num_seqs, exe.logits_chunk, exe.max_num_batched_tokens});
  int optin = 48 * 1024;
  check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ordinal),
             "prepare: cudaDeviceGetAttribute");
  k::AttnShape sh;
  sh.heads = s.num_heads / tp, sh.kv_heads = s.num_kv_heads / tp, sh.head_dim = D,
  sh.block_size = exe.block_size;
  while (exe.q_tile > 1 &&
         k::PrefillAttnKernel<k::bf16>::smem_floats(sh, exe.q_tile, exe.kv_tile) * 4 >
             static_cast<size_t>(optin))
    exe.q_tile /= 2;
  const int nt = std::max(128, (G + 31) / 32 * 32);
  while (exe.part_size > 32 &&
         k::DecodeAttnKernel<k::bf16>::smem_floats(sh, exe.part_size, nt) * 4 >
             static_cast<size_t>(optin))
    exe.part_size /= 2;
  exe.max_parts = (exe.max_model_len + exe.part_size - 1) / exe.part_size;
  if (k::PrefillAttnKernel<k::bf16>::smem_floats(sh, exe.q_tile, exe.kv_tile) * 4 >
          static_cast<size_t>(optin) ||
      k::DecodeAttnKernel<k::bf16>::smem_floats(sh, exe.part_size, nt) * 4 >
          static_cast<size_t>(optin))
    fail(HALO_STATUS_UNIMPLEMENTED, "prepare: head_dim=", D, " with ", G,
         " query heads per kv head needs more shared memory than the GPU's ", optin,
         " bytes per block");
}

// One GPU's matrix made of `parts` stacked by rows: converted to the 16-bit
// type dt, or (quantized parts) values, scales and offsets uploaded as given.
Proj upload_proj(Rank& r, Dt dt, int tp, const std::vector<Part>& parts) {
  Proj P;
  const HostProj& first = *parts[0].p;
  check_fusable(parts);
  if (!first.quantized()) {
    std::vector<uint16_t> buf;
    for (const Part& pt : parts)
      convert_block(pt.p->m, pt.cols, pt.r0, pt.r1, pt.c0, pt.c1, dt, buf);
    P.w16 = upload(r, buf);
    return P;
  }
  const QuantHost h = gather_quant(parts, tp);
  P.qtype = first.q.type;
  P.q = quant_view(first.q);
  P.q.values = upload(r, h.values);
  P.q.scales = upload(r, h.scales);
  if (first.q.offsets) P.q.offsets = upload(r, h.offsets);
  return P;
}

// Rank ri's shard of the weights, converted to the compute type and uploaded:
// its query/kv heads of QKV and o_proj, its intermediate rows of the MLP.
void upload_weights(const halo_executable& exe, Rank& r, int ri, const HostWeights& hw,
                    const std::vector<double>& inv_freq) {
  const Dt dt = exe.dt;
  const int tp = exe.tp;
  const int64_t V = exe.vocab, H = exe.hidden, I = exe.inter;
  const int64_t NQ = int64_t{exe.heads} * exe.head_dim, NKV = int64_t{exe.kv_heads} * exe.head_dim;
  const int64_t nq_l = NQ / tp, nkv_l = NKV / tp, i_l = I / tp;
  std::vector<uint16_t> buf;
  convert_block(hw.embed, H, 0, V, 0, H, dt, buf);
  r.embed = upload(r, buf);
  if (hw.tied)
    r.lm_head.w16 = r.embed;
  else
    r.lm_head = upload_proj(r, dt, tp, {{&hw.lm_head, H, 0, V, 0, H}});
  r.final_norm = upload(r, hw.final_norm);
  r.inv_freq = upload(r, inv_freq);
  for (const HostLayer& L : hw.layers) {
    LayerW W;
    const int64_t q0 = nq_l * ri, k0 = nkv_l * ri, i0 = i_l * ri;
    W.qkv = upload_proj(r, dt, tp,
                        {{&L.q, H, q0, q0 + nq_l, 0, H},
                         {&L.k, H, k0, k0 + nkv_l, 0, H},
                         {&L.v, H, k0, k0 + nkv_l, 0, H}});
    W.o = upload_proj(r, dt, tp, {{&L.o, NQ, 0, H, q0, q0 + nq_l}});
    W.gate_up =
        upload_proj(r, dt, tp, {{&L.gate, H, i0, i0 + i_l, 0, H}, {&L.up, H, i0, i0 + i_l, 0, H}});
    W.down = upload_proj(r, dt, tp, {{&L.down, I, 0, H, i0, i0 + i_l}});
    if (!L.q_bias.empty()) {
      std::vector<float> b(L.q_bias.begin() + q0, L.q_bias.begin() + q0 + nq_l);
      b.insert(b.end(), L.k_bias.begin() + k0, L.k_bias.begin() + k0 + nkv_l);
      b.insert(b.end(), L.v_bias.begin() + k0, L.v_bias.begin() + k0 + nkv_l);
      W.qkv_bias = upload(r, b);
    }
    if (!L.q_norm.empty()) {
      W.q_norm = upload(r, L.q_norm);
      W.k_norm = upload(r, L.k_norm);
    }
    W.attn_norm = upload(r, L.attn_norm);
    W.mlp_norm = upload(r, L.mlp_norm);
    r.layer.push_back(W);
  }
}

// Rank ri's step buffers, sized for the largest step the limits allow (the
// logits buffer on rank 0 only).
void alloc_step_buffers(const halo_executable& exe, Rank& r, int ri) {
  const int tp = exe.tp;
  const int64_t NQ = int64_t{exe.heads} * exe.head_dim, NKV = int64_t{exe.kv_heads} * exe.head_dim;
  const int64_t nq_l = NQ / tp, nkv_l = NKV / tp, i_l = int64_t{exe.inter} / tp;
  const size_t Tc = static_cast<size_t>(exe.max_num_batched_tokens),
               Hs = static_cast<size_t>(exe.hidden);
  const size_t es = 2, Lc = static_cast<size_t>(exe.logits_chunk),
               Sc = static_cast<size_t>(exe.max_num_seqs);
  const size_t qkv_n = static_cast<size_t>(nq_l + 2 * nkv_l);
  r.x = static_cast<float*>(r.alloc(Tc * Hs * 4));
  r.delta = static_cast<float*>(r.alloc(Tc * Hs * 4));
  r.qkv = static_cast<float*>(r.alloc(Tc * qkv_n * 4));
  r.gu = static_cast<float*>(r.alloc(Tc * 2 * static_cast<size_t>(i_l) * 4));
  r.h = r.alloc(Tc * Hs * es);
  r.attn = r.alloc(Tc * static_cast<size_t>(nq_l) * es);
  r.act = r.alloc(Tc * static_cast<size_t>(i_l) * es);
  r.hf = r.alloc(Lc * Hs * es);
  if (ri == 0) r.logits = static_cast<float*>(r.alloc(Lc * static_cast<size_t>(exe.vocab) * 4));
  const size_t parts =
      static_cast<size_t>(exe.max_parts) * Sc * static_cast<size_t>(exe.heads / tp);
  r.tmp_out = static_cast<float*>(r.alloc(parts * static_cast<size_t>(exe.head_dim) * 4));
  r.tmp_ml = static_cast<float*>(r.alloc(parts * 2 * 4));
  const int mb_cap = (exe.max_model_len + exe.block_size - 1) / exe.block_size;
  const int lora_tiles = exe.max_loras > 0
                             ? lora_tile_cap(static_cast<int>(Tc), static_cast<int>(Sc),
                                             exe.max_loras, k::kLoraTileRows)
                             : 0;
  const Layout cap = make_layout(static_cast<int>(Tc), static_cast<int>(Sc), mb_cap,
                                 static_cast<int>(Tc), static_cast<int>(Sc), static_cast<int>(Tc),
                                 lora_tiles, exe.max_loras > 0 ? static_cast<int>(Tc) : 0);
  r.inputs = static_cast<char*>(r.alloc(cap.bytes));
  r.inputs_cap = cap.bytes;
}

// The (in, out) of projection p on one GPU (its shard: column-parallel
// q/k/v/gate/up split out, row-parallel o/down split in).
std::pair<int64_t, int64_t> lora_dims(const halo_executable& exe, int p) {
  const int64_t H = exe.hidden, nq_l = int64_t{exe.heads} * exe.head_dim / exe.tp,
                nkv_l = int64_t{exe.kv_heads} * exe.head_dim / exe.tp,
                i_l = int64_t{exe.inter} / exe.tp;
  switch (p) {
    case plugin::kLoraQ:
      return {H, nq_l};
    case plugin::kLoraK:
    case plugin::kLoraV:
      return {H, nkv_l};
    case plugin::kLoraO:
      return {nq_l, H};
    case plugin::kLoraDown:
      return {i_l, H};
    default:
      return {H, i_l};  // gate, up
  }
}

// v1.6: where each projection's A and B^T lie in a slot's part of the pool,
// at the agreed rank (set once in prepare; the same on every GPU).
void lora_layout(halo_executable& exe) {
  exe.lora_off.clear();
  size_t o = 0;
  const size_t R = static_cast<size_t>(exe.max_lora_rank);
  for (int l = 0; l < exe.layers; ++l)
    for (int p = 0; p < plugin::kNumLoraProj; ++p) {
      const auto [in, out] = lora_dims(exe, p);
      exe.lora_off.push_back(o);
      o += R * static_cast<size_t>(in);
      exe.lora_off.push_back(o);
      o += R * static_cast<size_t>(out);
    }
  exe.lora_slot_elems = o;
}

// Rank r's LoRA pool, its table (every slot empty) and xa buffer.
void alloc_lora(const halo_executable& exe, Rank& r) {
  if (exe.max_loras == 0) return;
  const size_t slots = static_cast<size_t>(exe.max_loras);
  r.lora_pool = static_cast<k::bf16*>(r.alloc(slots * exe.lora_slot_elems * sizeof(k::bf16)));
  r.lora_host.assign(static_cast<size_t>(exe.layers) * plugin::kNumLoraProj * slots, {});
  r.lora_table = upload(r, r.lora_host);
  r.lora_xa =
      static_cast<float*>(r.alloc(static_cast<size_t>(exe.max_num_batched_tokens) *
                                  k::kLoraMaxFused * static_cast<size_t>(exe.max_lora_rank) * 4));
}

// One rank per GPU: its stream and cuBLAS handle, its weights and step
// buffers. Returns the GPU's free memory once they are in place.
uint64_t create_rank(halo_executable& exe, int ri, const HostWeights& hw,
                     const std::vector<double>& inv_freq) {
  auto rank = std::make_unique<Rank>();
  Rank& r = *rank;
  r.device = exe.device->ordinals[static_cast<size_t>(ri)];
  exe.ranks.push_back(std::move(rank));  // owned (and freed on failure) from here
  check_cuda(cudaSetDevice(r.device), "prepare: cudaSetDevice");
  check_cuda(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking),
             "prepare: cudaStreamCreate");
  check_blas(cublasCreate(&r.blas), "prepare: cublasCreate");
  check_blas(cublasSetStream(r.blas, r.stream), "prepare: cublasSetStream");
  const size_t ws = 32u << 20;  // a fixed workspace keeps cuBLAS capturable in CUDA graphs
  check_blas(cublasSetWorkspace(r.blas, r.alloc(ws), ws), "prepare: cublasSetWorkspace");
  upload_weights(exe, r, ri, hw, inv_freq);
  alloc_step_buffers(exe, r, ri);
  alloc_lora(exe, r);
  check_cuda(cudaDeviceSynchronize(), "prepare: upload");
  size_t free_b = 0, total_b = 0;
  check_cuda(cudaMemGetInfo(&free_b, &total_b), "prepare: cudaMemGetInfo");
  return free_b;
}

}  // namespace

void prepare(halo_prepare_args* args) {
  check_args("prepare", args, "prepare: args");
  if (args->device == nullptr) invalid("prepare: device is NULL");
  validate_spec(args->spec, "cuda");
  halo_limits* lim = args->limits;
  check_args("prepare", lim, "prepare: limits");
  // The core hands prepare device_open's list too: its keys are known here.
  OptionReader opts("prepare", args->options, args->num_options);
  opts.also_known({"tensor_parallel_size", "cuda_graphs"});
  opts.refuse_unknown();
  const halo_model_spec& s = *args->spec;
  auto state = args->device->state;
  const int tp = static_cast<int>(state->ordinals.size());
  if (s.num_heads % tp != 0 || s.num_kv_heads % tp != 0 || s.intermediate_size % tp != 0)
    invalid("prepare: tensor_parallel_size=", tp, " must divide num_heads=", s.num_heads,
            ", num_kv_heads=", s.num_kv_heads, " and intermediate_size=", s.intermediate_size);

  auto exe = std::make_unique<halo_executable>();
  exe->device = state;
  exe->tp = tp;
  copy_spec(*exe, s);
  const kernels::RopeParams rp = rope_params(s);
  std::vector<double> inv_freq(static_cast<size_t>(s.head_dim / 2));
  kernels::rope_inv_freq(rp, static_cast<size_t>(s.head_dim), inv_freq.data());

  const WeightSet w(args->weights, args->num_weights);
  const QuantizedSet qs(args, kQuantTypes, w);
  const HostWeights hw = read_weights(w, qs, s);
  qs.check_all_used();
  choose_compute_dtype(*exe, hw, lim);
  agree_limits(*exe, lim, s);
  choose_tiling(*exe, s, tp, state->ordinals[0]);
  lora_layout(*exe);

  // Upload, rank by rank.
  uint64_t min_free = UINT64_MAX;
  for (int ri = 0; ri < tp; ++ri)
    min_free = std::min<uint64_t>(min_free, create_rank(*exe, ri, hw, inv_freq));
  const uint64_t margin = std::max<uint64_t>(min_free / 20, 256ull << 20);  // graphs, cuBLAS, fragmentation
  const uint64_t avail = min_free > margin ? (min_free - margin) * static_cast<uint64_t>(tp) : 0;

  lim->max_num_seqs = exe->max_num_seqs;
  lim->max_model_len = exe->max_model_len;
  lim->max_num_batched_tokens = exe->max_num_batched_tokens;
  lim->block_size = exe->block_size;
  lim->capabilities = HALO_CAP_CHUNKED_PREFILL | HALO_CAP_MIXED_BATCH | HALO_CAP_LORA;
  lim->kv_bytes_per_block = exe->kv_bytes_per_block;
  lim->kv_memory_available = avail;
  set_kv_dtype(lim, exe->dt == Dt::BF16 ? HALO_KV_DTYPE_BF16 : HALO_KV_DTYPE_FP16);
  // GEMM inputs are 16-bit (fp32 accumulation), as the KV cache.
  set_compute_dtype(lim, exe->dt == Dt::BF16 ? HALO_COMPUTE_DTYPE_BF16 : HALO_COMPUTE_DTYPE_FP16);
  set_spec_tokens(lim, exe->spec_tokens);
  set_lora_limits(lim, exe->max_loras, exe->max_lora_rank);
  args->executable = exe.release();
}

// ---------------------------------------------------------------- KV cache

void kv_cache_create(halo_kv_cache_create_args* args) {
  check_args("kv_cache_create", args, "kv_cache_create: args");
  const halo_executable* exe = args->executable;
  if (exe == nullptr) invalid("kv_cache_create: executable is NULL");
  if (args->num_blocks <= 0) invalid("kv_cache_create: num_blocks=", args->num_blocks, " must be positive");
  if (args->block_size != exe->block_size)
    invalid("kv_cache_create: block_size=", args->block_size, " does not match the prepared block_size=",
            exe->block_size);
  auto kv = std::make_unique<halo_kv_cache>();
  kv->owner = exe;
  kv->num_blocks = args->num_blocks;
  kv->block_size = exe->block_size;
  kv->id = ++g_kv_ids;
  kv->array_elems = static_cast<size_t>(args->num_blocks) * static_cast<size_t>(exe->block_size) *
                    static_cast<size_t>(exe->kv_heads / exe->tp) * static_cast<size_t>(exe->head_dim);
  const size_t bytes = kv->array_elems * 2 * 2 * static_cast<size_t>(exe->layers);
  kv->base.assign(exe->ranks.size(), nullptr);
  for (size_t r = 0; r < exe->ranks.size(); ++r) {
    check_cuda(cudaSetDevice(exe->ranks[r]->device), "kv_cache_create: cudaSetDevice");
    const cudaError_t e = cudaMalloc(&kv->base[r], bytes);
    if (e != cudaSuccess) {
      kv->base[r] = nullptr;
      (void)cudaGetLastError();
      fail(HALO_STATUS_OUT_OF_MEMORY, "kv_cache_create: num_blocks=", args->num_blocks, " needs ", bytes,
           " bytes on GPU ", exe->ranks[r]->device, ": ", cudaGetErrorString(e));
    }
    check_cuda(cudaMemset(kv->base[r], 0, bytes), "kv_cache_create: cudaMemset");
  }
  args->kv_cache = kv.release();
}

void kv_cache_copy_blocks(halo_kv_cache_copy_blocks_args* args) {
  check_args("kv_cache_copy_blocks", args, "kv_cache_copy_blocks: args");
  halo_kv_cache* kv = args->kv_cache;
  if (kv == nullptr) invalid("kv_cache_copy_blocks: kv_cache is NULL");
  if (!validate_copy_blocks(args, kv->num_blocks)) return;
  const halo_executable* exe = kv->owner;
  std::lock_guard<std::mutex> lock(exe->device->mu);
  const size_t n = static_cast<size_t>(args->num_pairs);
  for (size_t r = 0; r < exe->ranks.size(); ++r) {
    Rank& rk = *exe->ranks[r];
    check_cuda(cudaSetDevice(rk.device), "kv_cache_copy_blocks: cudaSetDevice");
    int32_t* pairs = nullptr;
    check_cuda(cudaMalloc(&pairs, 2 * n * 4), "kv_cache_copy_blocks: cudaMalloc");
    cudaError_t e = cudaMemcpy(pairs, args->src_blocks, n * 4, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(pairs + n, args->dst_blocks, n * 4, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
      const size_t block_words = kv->array_elems / static_cast<size_t>(kv->num_blocks) * 2 / 4;
      e = launch<k::CopyBlocksKernel>({static_cast<uint32_t*>(kv->base[r]), pairs, pairs + n, kv->array_elems * 2 / 4,
                                       block_words},
                                      {args->num_pairs, 2 * exe->layers, 1}, 256, 0, rk.stream);
    }
    if (e == cudaSuccess) e = cudaStreamSynchronize(rk.stream);
    cudaFree(pairs);
    check_cuda(e, "kv_cache_copy_blocks");
  }
}

// ------------------------------------------------------------------ execute

void execute(halo_execute_args* a) {
  check_args("execute", a, "execute: args");
  halo_executable* exe = a->executable;
  const halo_kv_cache* kv = a->kv_cache;
  if (exe == nullptr) invalid("execute: executable is NULL");
  if (kv == nullptr) invalid("execute: kv_cache is NULL");
  if (kv->owner != exe) invalid("execute: kv_cache was created for a different executable");
  const KvLimits kvl{kv->num_blocks, kv->block_size};
  validate_execute(a, &exe->lim, &kvl);
  std::lock_guard<std::mutex> lock(exe->device->mu);
  if (exe->dt == Dt::BF16)
    execute_t<k::bf16>(a, exe, kv);
  else
    execute_t<k::f16>(a, exe, kv);
}

// -------------------------------------------------------------------- LoRA

namespace {

// Columns [c0, c0 + n) of A [rank, in] as bf16, [rank, n].
std::vector<uint16_t> lora_a_bf16(const LoraWeight& w, int64_t c0, int64_t n) {
  const size_t es = kernels::dtype_size(w.a_dtype), cn = static_cast<size_t>(n);
  std::vector<float> row(cn);
  std::vector<uint16_t> out(static_cast<size_t>(w.rank) * cn);
  for (int64_t j = 0; j < w.rank; ++j) {
    const char* src = static_cast<const char*>(w.a) + static_cast<size_t>(j * w.in + c0) * es;
    kernels::to_f32(src, w.a_dtype, row.data(), cn);
    for (size_t i = 0; i < cn; ++i)
      out[static_cast<size_t>(j) * cn + i] = kernels::f32_to_bf16(row[i]);
  }
  return out;
}

// Rows [n0, n0 + n) of B [out, rank], transposed to bf16 [rank, n].
std::vector<uint16_t> lora_bt_bf16(const LoraWeight& w, int64_t n0, int64_t n) {
  const size_t es = kernels::dtype_size(w.b_dtype), R = static_cast<size_t>(w.rank);
  const size_t cn = static_cast<size_t>(n);
  std::vector<float> row(R);
  std::vector<uint16_t> out(R * cn);
  for (size_t i = 0; i < cn; ++i) {
    const char* src = static_cast<const char*>(w.b) + (static_cast<size_t>(n0) + i) * R * es;
    kernels::to_f32(src, w.b_dtype, row.data(), R);
    for (size_t j = 0; j < R; ++j) out[j * cn + i] = kernels::f32_to_bf16(row[j]);
  }
  return out;
}

// Uploads a validated slot's adapters to GPU ri (its shards) and its table.
void lora_upload_rank(halo_executable& exe, size_t ri, size_t slot,
                      const std::vector<LoraWeight>& ws) {
  Rank& r = *exe.ranks[ri];
  check_cuda(cudaSetDevice(r.device), "lora_slot_set: cudaSetDevice");
  const size_t nl = static_cast<size_t>(exe.max_loras);
  std::vector<k::LoraMat<k::bf16>> table = r.lora_host;
  for (size_t i = slot; i < table.size(); i += nl) table[i] = {};
  k::bf16* base = r.lora_pool + slot * exe.lora_slot_elems;
  for (const LoraWeight& w : ws) {
    const auto [in_l, out_l] = lora_dims(exe, w.proj);
    const bool row_parallel = w.proj == plugin::kLoraO || w.proj == plugin::kLoraDown;
    const int64_t shard = static_cast<int64_t>(ri);
    const std::vector<uint16_t> a = lora_a_bf16(w, row_parallel ? in_l * shard : 0, in_l);
    const std::vector<uint16_t> bt = lora_bt_bf16(w, row_parallel ? 0 : out_l * shard, out_l);
    const size_t idx =
        static_cast<size_t>(w.layer) * plugin::kNumLoraProj + static_cast<size_t>(w.proj);
    k::bf16* da = base + exe.lora_off[2 * idx];
    k::bf16* db = base + exe.lora_off[2 * idx + 1];
    check_cuda(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice),
               "lora_slot_set: cudaMemcpy");
    check_cuda(cudaMemcpy(db, bt.data(), bt.size() * 2, cudaMemcpyHostToDevice),
               "lora_slot_set: cudaMemcpy");
    table[idx * nl + slot] = {da, db, static_cast<int32_t>(w.rank)};
  }
  check_cuda(cudaMemcpy(r.lora_table, table.data(), table.size() * sizeof(table[0]),
                        cudaMemcpyHostToDevice),
             "lora_slot_set: cudaMemcpy (table)");
  check_cuda(cudaDeviceSynchronize(),
             "lora_slot_set: upload");  // pageable copies may still be in flight
  r.lora_host = std::move(table);
}

}  // namespace

void lora_slot_set(halo_lora_slot_args* args) {
  check_args("lora_slot_set", args, "lora_slot_set: args");
  halo_executable* exe = args->executable;
  if (exe == nullptr) invalid("lora_slot_set: executable is NULL");
  LoraModel m;
  m.num_layers = exe->layers, m.hidden = exe->hidden, m.intermediate = exe->inter;
  m.q_out = exe->heads * exe->head_dim, m.kv_out = exe->kv_heads * exe->head_dim;
  // Everything is checked before the slot is touched: a refused call leaves it as it was.
  const std::vector<LoraWeight> ws =
      validate_lora_slot(args, m, exe->max_loras, exe->max_lora_rank);
  std::lock_guard<std::mutex> lock(exe->device->mu);
  const size_t slot = static_cast<size_t>(args->slot);
  // Empty (steps run it as the base) until every GPU holds the new adapters:
  // a failure while uploading leaves the slot empty rather than half written.
  exe->lora_filled[slot] = 0;
  for (size_t ri = 0; ri < exe->ranks.size(); ++ri) lora_upload_rank(*exe, ri, slot, ws);
  exe->lora_filled[slot] = ws.empty() ? 0 : 1;
}

}  // namespace halo::cuda
