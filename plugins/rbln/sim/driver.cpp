// The simulated driver: Level Zero core calls (ze_api.h signatures) and the
// rbln extensions over a process-wide simulator of `chips` ATOM-class chips.
// Device memory is host memory accounted per chip against its capacity;
// command lists run when executed on a queue (synchronously, on the calling
// thread, with the host kernels of halo_kernels) and advance each chip's
// simulated clock by the cost model.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include <unistd.h>

#include "halo/kernels/kernels.h"
#include "sim.h"

#ifndef RBLN_SIM_DEFAULT_PROFILE
#define RBLN_SIM_DEFAULT_PROFILE ""
#endif

struct _ze_driver_handle_t {
  int dummy = 0;
};
struct _ze_device_handle_t {
  int index = 0;
  uint64_t used = 0;
  bool lost = false;
  ze_rbln_clock_t clock{};
};
struct _ze_context_handle_t {
  int dummy = 0;
};
struct _ze_event_pool_handle_t {
  int dummy = 0;
};
struct _ze_event_handle_t {
  std::atomic<int> state{0};  // 0 not signalled, 1 signalled, 2 never (hung), 3 failed
};

struct _ze_rbln_graph_handle_t {
  ze_rbln_decoder_desc_t model{};
  std::vector<double> inv_freq;
  ze_rbln_graph_kind_t kind{};
  uint32_t rows = 0, max_seq_len = 0, tokens_per_seq = 1;
  std::vector<ze_device_handle_t> devices;
  std::vector<void*> weights;  // [devices][slots]
};

namespace {
struct CopyCmd {
  void* dst;
  const void* src;
  size_t size;
};
struct SignalCmd {
  ze_event_handle_t event;
};
struct GraphCmd {
  ze_rbln_graph_handle_t graph;
  std::vector<int32_t> tokens, positions, ctx, blocks, logits_rows;
  std::vector<int64_t> slots;
  std::vector<void*> kv;
  uint32_t kv_num_blocks = 0;
  float* logits = nullptr;
  ze_event_handle_t signal = nullptr;
};
using Command = std::variant<CopyCmd, SignalCmd, GraphCmd>;
}  // namespace

struct _ze_command_list_handle_t {
  ze_device_handle_t device = nullptr;
  std::vector<Command> cmds;
  bool closed = false;
};
struct _ze_command_queue_handle_t {
  ze_device_handle_t device = nullptr;
  ze_result_t status = ZE_RESULT_SUCCESS;  // of the last submission
  bool hung = false;
};

namespace rbln::sim {
namespace {

thread_local std::string g_last_error;

ze_result_t fail(ze_result_t r, std::string msg) {
  g_last_error = std::move(msg);
  return r;
}

struct Allocation {
  ze_device_handle_t device;
  size_t size;
};

struct Sim {
  std::mutex mu;
  bool initialized = false;
  Profile profile;
  uint32_t host_threads = 0;
  std::unique_ptr<halo::kernels::ThreadPool> pool;
  pid_t pool_pid = 0;  // a forked child has none of the parent's worker threads
  _ze_driver_handle_t driver;
  std::vector<std::unique_ptr<_ze_device_handle_t>> chips;
  std::map<void*, Allocation> allocations;
  int64_t alloc_count = 0;
  int64_t exec_count = 0;
};

Sim& sim() {
  static Sim s;
  return s;
}

std::string default_profile_path() {
  if (const char* env = std::getenv("HALO_RBLN_PROFILE"); env && *env) return env;
  return RBLN_SIM_DEFAULT_PROFILE;
}

// Requires sim().mu held.
ze_result_t configure_locked(const ze_rbln_sim_desc_t* desc) {
  Sim& s = sim();
  if (!s.allocations.empty())
    return fail(ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE, "rbln simulator: cannot reconfigure while device memory is allocated");
  std::string path = desc && desc->profile_path && *desc->profile_path ? desc->profile_path : default_profile_path();
  Profile p;
  try {
    if (!path.empty()) p = load_profile(path);
    const char* env_faults = std::getenv("HALO_RBLN_FAULT");
    const char* faults = desc && desc->faults ? desc->faults : env_faults;
    if (faults) parse_faults(faults, p.faults);
  } catch (const std::exception& e) {
    return fail(ZE_RESULT_ERROR_INVALID_ARGUMENT, e.what());
  }
  s.profile = std::move(p);
  const uint32_t threads = desc && desc->host_threads ? desc->host_threads
                                                      : std::max(1u, std::thread::hardware_concurrency());
  if (!s.pool || threads != s.host_threads) {
    if (s.pool && s.pool_pid != ::getpid()) (void)s.pool.release();  // its threads live in the parent only
    s.pool = std::make_unique<halo::kernels::ThreadPool>(static_cast<int>(threads));
    s.pool_pid = ::getpid();
    s.host_threads = threads;
  }
  s.chips.clear();
  for (int i = 0; i < s.profile.chips; ++i) {
    auto d = std::make_unique<_ze_device_handle_t>();
    d->index = i;
    s.chips.push_back(std::move(d));
  }
  s.alloc_count = 0;
  s.exec_count = 0;
  s.initialized = true;
  return ZE_RESULT_SUCCESS;
}

ze_result_t ensure_init() {
  Sim& s = sim();
  if (s.initialized) return ZE_RESULT_SUCCESS;
  return configure_locked(nullptr);
}

// ------------------------------------------------------------ execution

using halo::kernels::DType;

DType dtype_of(uint32_t d) { return d == ZE_RBLN_DTYPE_BF16 ? DType::BF16 : d == ZE_RBLN_DTYPE_FP16 ? DType::F16 : DType::F32; }

template <class T>
void grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// One graph execution on the host: its shapes, weights and activations,
// shared by its stages (embedding, per layer attention then MLP, logits).
// Every chip's shard runs in turn; the all-reduce is a sum of the chips'
// partial products in chip order.
class HostGraphRun {
 public:
  HostGraphRun(halo::kernels::ThreadPool& pool, const GraphCmd& g)
      : pool_(pool),
        g_(g),
        G_(*g.graph),
        m_(G_.model),
        n_(static_cast<uint32_t>(G_.devices.size())),
        R_(G_.rows),
        H_(m_.hidden),
        hd_(m_.head_dim),
        half_(hd_ / 2),
        V_(m_.vocab),
        group_(m_.heads / m_.kv_heads),
        wt_(dtype_of(m_.weight_dtype)),
        slots_(ze_rbln_num_weight_slots(m_.layers)),
        eps_(m_.rms_norm_eps),
        scale_(1.0f / std::sqrt(static_cast<float>(hd_))),
        x_(R_ * H_),
        h_(R_ * H_),
        sum_(R_ * H_),
        part_(R_ * H_),
        cs_(R_ * half_),
        sn_(R_ * half_) {}

  void run() {
    embed();
    for (uint32_t l = 0; l < m_.layers; ++l) {
      attention(l);
      mlp(l);
    }
    logits();
  }

 private:
  void* W(uint32_t c, size_t slot) const { return G_.weights[c * slots_ + slot]; }
  static size_t LS(uint32_t l, size_t s) {
    return ZE_RBLN_W_GLOBAL + size_t{l} * ZE_RBLN_L_SLOTS + s;
  }
  void* WL(uint32_t c, uint32_t l, size_t s) const { return W(c, LS(l, s)); }
  static const float* F(void* p) { return static_cast<const float*>(p); }

  // y [M, N] = x [M, K] . w^T for the matrix w [N, K] of chip c in `slot`
  // (`qbit` of quant_mask): an int8 one is dequantized (scale * q, fp32)
  // into a scratch matrix first, weight-only quantization (x stays fp32).
  void mm(const float* x, size_t M, size_t K, uint32_t c, size_t slot, uint32_t qbit, size_t N,
          const float* bias, float* y) {
    namespace k = halo::kernels;
    if (!(m_.quant_mask & qbit)) {
      k::matmul_nt(pool_, x, M, K, W(c, slot), wt_, N, bias, y);
      return;
    }
    const auto* q = static_cast<const int8_t*>(W(c, slot));
    const auto* sc = reinterpret_cast<const float*>(reinterpret_cast<const char*>(q) +
                                                    ze_rbln_q8_scales_offset(uint64_t{N} * K));
    const size_t group = ze_rbln_q8_group(&m_, static_cast<uint32_t>(K)), groups = K / group;
    grow(wdq_, N * K);
    pool_.parallel_for(N, [&](size_t r, int) {
      for (size_t kk = 0; kk < K; ++kk)
        wdq_[r * K + kk] = sc[r * groups + kk / group] * static_cast<float>(q[r * K + kk]);
    });
    k::matmul_nt(pool_, x, M, K, wdq_.data(), DType::F32, N, bias, y);
  }
  static constexpr uint32_t bit(uint32_t layer_slot) { return 1u << layer_slot; }

  // The tokens' embeddings and their rotary cos/sin.
  void embed() {
    namespace k = halo::kernels;
    const size_t esz = k::dtype_size(wt_);
    pool_.parallel_for(R_, [&](size_t t, int) {
      k::to_f32(static_cast<const char*>(W(0, ZE_RBLN_W_EMBED)) +
                    static_cast<size_t>(g_.tokens[t]) * H_ * esz,
                wt_, x_.data() + t * H_, H_);
      k::rope_cos_sin(g_.positions[t], G_.inv_freq.data(), half_, cs_.data() + t * half_,
                      sn_.data() + t * half_);
    });
  }

  // Layer l's attention block: each chip's query heads, all-reduced into x.
  void attention(uint32_t l) {
    namespace k = halo::kernels;
    pool_.parallel_for(R_, [&](size_t t, int) {
      k::rmsnorm(x_.data() + t * H_, F(WL(0, l, ZE_RBLN_L_ATTN_NORM)), H_, eps_,
                 h_.data() + t * H_);
    });
    for (uint32_t c = 0; c < n_; ++c) attention_shard(l, c);
    pool_.parallel_for(R_, [&](size_t t, int) {
      k::add_inplace(x_.data() + t * H_, sum_.data() + t * H_, H_);
      k::rmsnorm(x_.data() + t * H_, F(WL(0, l, ZE_RBLN_L_MLP_NORM)), H_, eps_, h_.data() + t * H_);
    });
  }

  // Chip c's share of layer l's attention: QKV, qk-norm, RoPE, KV write,
  // paged attention, o_proj into sum (chip 0) or added to it.
  void attention_shard(uint32_t l, uint32_t c) {
    namespace k = halo::kernels;
    const ze_rbln_decoder_desc_t& m = m_;
    const size_t R = R_, H = H_, hd = hd_, half = half_;
    const size_t q_lo = ze_rbln_split(m.heads, c, n_),
                 nq = ze_rbln_split(m.heads, c + 1, n_) - q_lo;
    const size_t kv_lo = ze_rbln_kv_lo(&m, c, n_), nkv = ze_rbln_kv_hi(&m, c, n_) - kv_lo;
    const size_t NQ = nq * hd, NKV = nkv * hd;
    grow(q_, R * NQ);
    grow(attn_, R * NQ);
    grow(kk_, R * NKV);
    grow(vv_, R * NKV);
    mm(h_.data(), R, H, c, LS(l, ZE_RBLN_L_Q), bit(ZE_RBLN_L_Q), NQ, F(WL(c, l, ZE_RBLN_L_QB)),
       q_.data());
    mm(h_.data(), R, H, c, LS(l, ZE_RBLN_L_K), bit(ZE_RBLN_L_K), NKV, F(WL(c, l, ZE_RBLN_L_KB)),
       kk_.data());
    mm(h_.data(), R, H, c, LS(l, ZE_RBLN_L_V), bit(ZE_RBLN_L_V), NKV, F(WL(c, l, ZE_RBLN_L_VB)),
       vv_.data());
    float* kc = static_cast<float*>(g_.kv[(size_t{c} * m.layers + l) * 2 + 0]);
    float* vc = static_cast<float*>(g_.kv[(size_t{c} * m.layers + l) * 2 + 1]);
    const bool qk_norm = m.flags & ZE_RBLN_MODEL_QK_NORM;
    pool_.parallel_for(R, [&](size_t t, int) {
      float* qt = q_.data() + t * NQ;
      float* kt = kk_.data() + t * NKV;
      if (qk_norm) {
        for (size_t i = 0; i < nq; ++i)
          k::rmsnorm(qt + i * hd, F(WL(c, l, ZE_RBLN_L_QN)), hd, eps_, qt + i * hd);
        for (size_t i = 0; i < nkv; ++i)
          k::rmsnorm(kt + i * hd, F(WL(c, l, ZE_RBLN_L_KN)), hd, eps_, kt + i * hd);
      }
      k::rope_neox(qt, nq, hd, cs_.data() + t * half, sn_.data() + t * half);
      k::rope_neox(kt, nkv, hd, cs_.data() + t * half, sn_.data() + t * half);
      const int64_t slot = g_.slots[t];
      if (slot >= 0) {
        std::memcpy(kc + static_cast<size_t>(slot) * NKV, kt, NKV * sizeof(float));
        std::memcpy(vc + static_cast<size_t>(slot) * NKV, vv_.data() + t * NKV,
                    NKV * sizeof(float));
      }
    });
    const k::PagedKV pkv{kc, vc, static_cast<int32_t>(G_.max_seq_len), static_cast<int32_t>(nkv),
                         static_cast<int32_t>(hd)};
    pool_.parallel_for(R * nkv, [&](size_t task, int worker) {
      const size_t t = task / nkv, gl = task % nkv;
      const size_t g_glob = kv_lo + gl;
      // Local query heads that read this kv head: a contiguous run.
      const size_t h0 = std::max(q_lo, g_glob * group_),
                   h1 = std::min(q_lo + nq, (g_glob + 1) * group_);
      float* out = attn_.data() + t * NQ + (h0 - q_lo) * hd;
      if (h1 <= h0) return;
      const int32_t n_ctx = g_.ctx[t];
      if (n_ctx <= 0) {  // padding row
        std::fill(out, out + (h1 - h0) * hd, 0.0f);
        return;
      }
      float* scores = pool_.scratch(worker, 1, static_cast<size_t>(n_ctx));
      k::paged_attention(q_.data() + t * NQ + (h0 - q_lo) * hd, h1 - h0, pkv,
                         static_cast<int32_t>(gl), &g_.blocks[t], n_ctx, scale_, scores, out);
    });
    mm(attn_.data(), R, NQ, c, LS(l, ZE_RBLN_L_O), bit(ZE_RBLN_L_O), H, nullptr,
       c == 0 ? sum_.data() : part_.data());
    if (c > 0) k::add_inplace(sum_.data(), part_.data(), R * H);  // all-reduce, chip order
  }

  // Layer l's MLP: each chip's intermediate rows, all-reduced into x.
  void mlp(uint32_t l) {
    namespace k = halo::kernels;
    const size_t R = R_, H = H_;
    for (uint32_t c = 0; c < n_; ++c) {
      const size_t I =
          ze_rbln_split(m_.intermediate, c + 1, n_) - ze_rbln_split(m_.intermediate, c, n_);
      grow(gate_, R * I);
      grow(up_, R * I);
      mm(h_.data(), R, H, c, LS(l, ZE_RBLN_L_GATE), bit(ZE_RBLN_L_GATE), I, nullptr, gate_.data());
      mm(h_.data(), R, H, c, LS(l, ZE_RBLN_L_UP), bit(ZE_RBLN_L_UP), I, nullptr, up_.data());
      pool_.parallel_for(R, [&](size_t t, int) {
        if (m_.activation == 1)
          k::gelu_tanh_mul(gate_.data() + t * I, up_.data() + t * I, gate_.data() + t * I, I);
        else
          k::silu_mul(gate_.data() + t * I, up_.data() + t * I, gate_.data() + t * I, I);
      });
      mm(gate_.data(), R, I, c, LS(l, ZE_RBLN_L_DOWN), bit(ZE_RBLN_L_DOWN), H, nullptr,
         c == 0 ? sum_.data() : part_.data());
      if (c > 0) k::add_inplace(sum_.data(), part_.data(), R * H);
    }
    pool_.parallel_for(
        R, [&](size_t t, int) { k::add_inplace(x_.data() + t * H, sum_.data() + t * H, H); });
  }

  // The requested rows' logits: final norm, then each chip's vocabulary
  // shard of lm_head, all-gathered.
  void logits() {
    namespace k = halo::kernels;
    const size_t L = g_.logits_rows.size(), H = H_, V = V_;
    if (L == 0) return;
    std::vector<float> fr(L * H), shard;
    for (size_t i = 0; i < L; ++i)
      k::rmsnorm(x_.data() + static_cast<size_t>(g_.logits_rows[i]) * H,
                 F(W(0, ZE_RBLN_W_FINAL_NORM)), H, eps_, fr.data() + i * H);
    for (uint32_t c = 0; c < n_; ++c) {
      const size_t v_lo = ze_rbln_split(m_.vocab, c, n_),
                   nv = ze_rbln_split(m_.vocab, c + 1, n_) - v_lo;
      if (n_ == 1) {
        mm(fr.data(), L, H, c, ZE_RBLN_W_LM_HEAD, ZE_RBLN_QUANT_LM_HEAD, V, nullptr, g_.logits);
        break;
      }
      grow(shard, L * nv);
      mm(fr.data(), L, H, c, ZE_RBLN_W_LM_HEAD, ZE_RBLN_QUANT_LM_HEAD, nv, nullptr, shard.data());
      for (size_t i = 0; i < L; ++i)
        std::memcpy(g_.logits + i * V + v_lo, shard.data() + i * nv,
                    nv * sizeof(float));  // all-gather
    }
  }

  halo::kernels::ThreadPool& pool_;
  const GraphCmd& g_;
  const _ze_rbln_graph_handle_t& G_;
  const ze_rbln_decoder_desc_t& m_;
  const uint32_t n_;
  const size_t R_, H_, hd_, half_, V_, group_;
  const DType wt_;
  const size_t slots_;
  const float eps_, scale_;
  std::vector<float> x_, h_, sum_, part_, cs_, sn_;
  std::vector<float> q_, kk_, vv_, attn_, gate_, up_, wdq_;
};

// Runs one graph execution on the host.
void run_graph(halo::kernels::ThreadPool& pool, const GraphCmd& g) { HostGraphRun(pool, g).run(); }

void advance_clock(const GraphCmd& g, const ze_rbln_cost_t& cost) {
  for (ze_device_handle_t d : g.graph->devices) {
    auto& c = d->clock;
    c.executions++;
    c.rows += g.graph->rows;
    c.last = cost;
    c.total.total_s += cost.total_s;
    c.total.compute_s += cost.compute_s;
    c.total.memory_s += cost.memory_s;
    c.total.link_s += cost.link_s;
    c.total.overhead_s += cost.overhead_s;
    c.total.flops += cost.flops;
    c.total.dram_bytes += cost.dram_bytes;
    c.total.link_bytes += cost.link_bytes;
  }
}

ze_rbln_graph_desc_t desc_of(const _ze_rbln_graph_handle_t& G) {
  ze_rbln_graph_desc_t d{};
  d.kind = G.kind;
  d.rows = G.rows;
  d.max_seq_len = G.max_seq_len;
  d.tokens_per_seq = G.tokens_per_seq;
  d.model = &G.model;
  d.num_devices = static_cast<uint32_t>(G.devices.size());
  d.devices = G.devices.data();
  return d;
}

// Runs one graph command; returns the queue status it leaves.
ze_result_t execute_graph(Sim& s, ze_command_queue_handle_t queue, const GraphCmd& g) {
  for (ze_device_handle_t d : g.graph->devices)
    if (d->lost)
      return fail(ZE_RESULT_ERROR_DEVICE_LOST, "rbln chip " + std::to_string(d->index) + " is lost (it failed earlier)");
  const int64_t step = ++s.exec_count;
  const Faults& f = s.profile.faults;
  if (f.chip_fail_at_step > 0 && step == f.chip_fail_at_step) {
    const int idx = f.chip_fail_index >= 0 ? f.chip_fail_index : g.graph->devices.back()->index;
    for (auto& chip : s.chips)
      if (chip->index == idx) chip->lost = true;
    if (g.signal) g.signal->state = 3;
    return fail(ZE_RESULT_ERROR_DEVICE_LOST, "rbln chip " + std::to_string(idx) + " failed during graph execution " +
                                                 std::to_string(step) + " (fault injection chip_fail_at_step=" +
                                                 std::to_string(f.chip_fail_at_step) + ")");
  }
  if (f.hang_at_step > 0 && step >= f.hang_at_step) {
    queue->hung = true;
    if (g.signal) g.signal->state = 2;
    return ZE_RESULT_SUCCESS;  // submitted; it never completes
  }
  const ze_rbln_graph_desc_t d = desc_of(*g.graph);
  if (s.pool_pid != ::getpid()) {  // forked since the pool was made: its workers are gone
    (void)s.pool.release();      // never joined (the threads do not exist here); leaked on purpose
    s.pool = std::make_unique<halo::kernels::ThreadPool>(static_cast<int>(s.host_threads));
    s.pool_pid = ::getpid();
  }
  run_graph(*s.pool, g);
  advance_clock(g, estimate(s.profile, d, g.ctx.data(), static_cast<uint32_t>(g.logits_rows.size())));
  if (g.signal) g.signal->state = 1;
  return ZE_RESULT_SUCCESS;
}

// A known kind; a VERIFY graph's rows are whole sequences of tokens_per_seq.
bool graph_kind_ok(const ze_rbln_graph_desc_t& d) {
  if (d.kind == ZE_RBLN_GRAPH_VERIFY)
    return d.tokens_per_seq >= 1 && d.rows % d.tokens_per_seq == 0;
  return d.kind == ZE_RBLN_GRAPH_PREFILL || d.kind == ZE_RBLN_GRAPH_DECODE;
}

}  // namespace
}  // namespace rbln::sim

using namespace rbln::sim;

#define SIM_LOCK std::lock_guard<std::mutex> sim_lock_(sim().mu)
#define SIM_CATCH                                                                       \
  catch (const std::bad_alloc&) {                                                       \
    return fail(ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY, "rbln simulator: out of host memory"); \
  }                                                                                     \
  catch (const std::exception& e) {                                                     \
    return fail(ZE_RESULT_ERROR_UNKNOWN, std::string("rbln simulator: ") + e.what());   \
  }

extern "C" {

ze_result_t zeInit(ze_init_flags_t) {
  SIM_LOCK;
  try {
    return ensure_init();
  }
  SIM_CATCH
}

ze_result_t zeDriverGet(uint32_t* pCount, ze_driver_handle_t* phDrivers) {
  SIM_LOCK;
  if (!sim().initialized) return fail(ZE_RESULT_ERROR_UNINITIALIZED, "zeDriverGet: zeInit was not called");
  if (!pCount) return fail(ZE_RESULT_ERROR_INVALID_NULL_POINTER, "zeDriverGet: pCount is NULL");
  if (*pCount == 0 || !phDrivers) {
    *pCount = 1;
    return ZE_RESULT_SUCCESS;
  }
  phDrivers[0] = &sim().driver;
  *pCount = 1;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDeviceGet(ze_driver_handle_t hDriver, uint32_t* pCount, ze_device_handle_t* phDevices) {
  SIM_LOCK;
  Sim& s = sim();
  if (hDriver != &s.driver) return fail(ZE_RESULT_ERROR_INVALID_NULL_HANDLE, "zeDeviceGet: bad driver handle");
  if (!pCount) return fail(ZE_RESULT_ERROR_INVALID_NULL_POINTER, "zeDeviceGet: pCount is NULL");
  const uint32_t n = static_cast<uint32_t>(s.chips.size());
  if (*pCount == 0 || !phDevices) {
    *pCount = n;
    return ZE_RESULT_SUCCESS;
  }
  *pCount = std::min(*pCount, n);
  for (uint32_t i = 0; i < *pCount; ++i) phDevices[i] = s.chips[i].get();
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDeviceGetProperties(ze_device_handle_t hDevice, ze_device_properties_t* p) {
  SIM_LOCK;
  if (!hDevice) return fail(ZE_RESULT_ERROR_INVALID_NULL_HANDLE, "zeDeviceGetProperties: device is NULL");
  if (!p) return fail(ZE_RESULT_ERROR_INVALID_NULL_POINTER, "zeDeviceGetProperties: properties is NULL");
  const Profile& pr = sim().profile;
  p->type = ZE_DEVICE_TYPE_VPU;
  p->vendorId = 0x1eff;  // Rebellions' PCI vendor id
  p->deviceId = 0x1220;
  p->flags = 0;
  p->subdeviceId = 0;
  p->coreClockRate = 0;
  p->maxMemAllocSize = pr.usable_per_chip();
  p->maxHardwareContexts = 1;
  p->maxCommandQueuePriority = 0;
  std::snprintf(p->name, sizeof(p->name), "%s chip %d", pr.name.c_str(), hDevice->index);
  std::memset(p->uuid.id, 0, sizeof(p->uuid.id));
  p->uuid.id[0] = static_cast<uint8_t>(hDevice->index);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDeviceGetMemoryProperties(ze_device_handle_t hDevice, uint32_t* pCount,
                                        ze_device_memory_properties_t* pMem) {
  SIM_LOCK;
  if (!hDevice) return fail(ZE_RESULT_ERROR_INVALID_NULL_HANDLE, "zeDeviceGetMemoryProperties: device is NULL");
  if (!pCount) return fail(ZE_RESULT_ERROR_INVALID_NULL_POINTER, "zeDeviceGetMemoryProperties: pCount is NULL");
  if (*pCount == 0 || !pMem) {
    *pCount = 1;
    return ZE_RESULT_SUCCESS;
  }
  *pCount = 1;
  pMem->flags = 0;
  pMem->maxClockRate = 0;
  pMem->maxBusWidth = 256;
  pMem->totalSize = sim().profile.usable_per_chip();
  std::snprintf(pMem->name, sizeof(pMem->name), "GDDR6");
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeContextCreate(ze_driver_handle_t hDriver, const ze_context_desc_t*, ze_context_handle_t* phContext) {
  if (hDriver != &sim().driver) return fail(ZE_RESULT_ERROR_INVALID_NULL_HANDLE, "zeContextCreate: bad driver handle");
  if (!phContext) return fail(ZE_RESULT_ERROR_INVALID_NULL_POINTER, "zeContextCreate: phContext is NULL");
  try {
    *phContext = std::make_unique<_ze_context_handle_t>().release();
    return ZE_RESULT_SUCCESS;
  }
  SIM_CATCH
}

ze_result_t zeContextDestroy(ze_context_handle_t hContext) {
  std::unique_ptr<_ze_context_handle_t> owned(hContext);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeMemAllocDevice(ze_context_handle_t hContext, const ze_device_mem_alloc_desc_t*, size_t size,
                             size_t alignment, ze_device_handle_t hDevice, void** pptr) {
  SIM_LOCK;
  Sim& s = sim();
  if (!hContext || !hDevice) return fail(ZE_RESULT_ERROR_INVALID_NULL_HANDLE, "zeMemAllocDevice: NULL handle");
  if (!pptr) return fail(ZE_RESULT_ERROR_INVALID_NULL_POINTER, "zeMemAllocDevice: pptr is NULL");
  if (size == 0) return fail(ZE_RESULT_ERROR_UNSUPPORTED_SIZE, "zeMemAllocDevice: size is 0");
  if (hDevice->lost)
    return fail(ZE_RESULT_ERROR_DEVICE_LOST, "zeMemAllocDevice: rbln chip " + std::to_string(hDevice->index) + " is lost");
  const int64_t nth = ++s.alloc_count;
  if (s.profile.faults.alloc_fail > 0 && nth == s.profile.faults.alloc_fail)
    return fail(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY,
                "rbln chip " + std::to_string(hDevice->index) + ": allocation of " + std::to_string(size) +
                    " bytes failed (fault injection alloc_fail=" + std::to_string(nth) + ")");
  const uint64_t cap = s.profile.usable_per_chip();
  if (hDevice->used + size > cap)
    return fail(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY,
                "rbln chip " + std::to_string(hDevice->index) + ": cannot allocate " + std::to_string(size) +
                    " bytes: " + std::to_string(hDevice->used) + " of " + std::to_string(cap) + " bytes in use");
  const size_t align = std::max<size_t>(64, alignment);
  const size_t rounded = (size + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (!p) return fail(ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY, "rbln simulator: host memory exhausted backing device memory");
  std::memset(p, 0, rounded);
  try {
    s.allocations.emplace(p, Allocation{hDevice, size});
  } catch (...) {
    std::free(p);
    return fail(ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY, "rbln simulator: out of host memory");
  }
  hDevice->used += size;
  *pptr = p;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeMemFree(ze_context_handle_t, void* ptr) {
  SIM_LOCK;
  auto& a = sim().allocations;
  auto it = a.find(ptr);
  if (it == a.end()) return fail(ZE_RESULT_ERROR_INVALID_ARGUMENT, "zeMemFree: not a device allocation");
  it->second.device->used -= it->second.size;
  std::free(ptr);
  a.erase(it);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeCommandQueueCreate(ze_context_handle_t, ze_device_handle_t hDevice, const ze_command_queue_desc_t*,
                                 ze_command_queue_handle_t* phQueue) {
  if (!hDevice || !phQueue) return fail(ZE_RESULT_ERROR_INVALID_NULL_POINTER, "zeCommandQueueCreate: NULL argument");
  try {
    auto q = std::make_unique<_ze_command_queue_handle_t>();
    q->device = hDevice;
    *phQueue = q.release();
    return ZE_RESULT_SUCCESS;
  }
  SIM_CATCH
}

ze_result_t zeCommandQueueDestroy(ze_command_queue_handle_t hQueue) {
  std::unique_ptr<_ze_command_queue_handle_t> owned(hQueue);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeCommandListCreate(ze_context_handle_t, ze_device_handle_t hDevice, const ze_command_list_desc_t*,
                                ze_command_list_handle_t* phList) {
  if (!hDevice || !phList) return fail(ZE_RESULT_ERROR_INVALID_NULL_POINTER, "zeCommandListCreate: NULL argument");
  try {
    auto l = std::make_unique<_ze_command_list_handle_t>();
    l->device = hDevice;
    *phList = l.release();
    return ZE_RESULT_SUCCESS;
  }
  SIM_CATCH
}

ze_result_t zeCommandListDestroy(ze_command_list_handle_t hList) {
  std::unique_ptr<_ze_command_list_handle_t> owned(hList);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeCommandListClose(ze_command_list_handle_t hList) {
  if (!hList) return fail(ZE_RESULT_ERROR_INVALID_NULL_HANDLE, "zeCommandListClose: NULL list");
  hList->closed = true;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeCommandListReset(ze_command_list_handle_t hList) {
  if (!hList) return fail(ZE_RESULT_ERROR_INVALID_NULL_HANDLE, "zeCommandListReset: NULL list");
  hList->cmds.clear();
  hList->closed = false;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeCommandListAppendMemoryCopy(ze_command_list_handle_t hList, void* dst, const void* src, size_t size,
                                          ze_event_handle_t hSignal, uint32_t, ze_event_handle_t*) {
  if (!hList) return fail(ZE_RESULT_ERROR_INVALID_NULL_HANDLE, "zeCommandListAppendMemoryCopy: NULL list");
  if (hList->closed) return fail(ZE_RESULT_ERROR_INVALID_ARGUMENT, "zeCommandListAppendMemoryCopy: list is closed");
  if ((!dst || !src) && size) return fail(ZE_RESULT_ERROR_INVALID_NULL_POINTER, "zeCommandListAppendMemoryCopy: NULL pointer");
  try {
    hList->cmds.emplace_back(CopyCmd{dst, src, size});
    if (hSignal) hList->cmds.emplace_back(SignalCmd{hSignal});
    return ZE_RESULT_SUCCESS;
  }
  SIM_CATCH
}

ze_result_t zeCommandListAppendSignalEvent(ze_command_list_handle_t hList, ze_event_handle_t hEvent) {
  if (!hList || !hEvent) return fail(ZE_RESULT_ERROR_INVALID_NULL_HANDLE, "zeCommandListAppendSignalEvent: NULL handle");
  try {
    hList->cmds.emplace_back(SignalCmd{hEvent});
    return ZE_RESULT_SUCCESS;
  }
  SIM_CATCH
}

ze_result_t zeCommandQueueExecuteCommandLists(ze_command_queue_handle_t hQueue, uint32_t numLists,
                                              ze_command_list_handle_t* phLists, ze_fence_handle_t) {
  SIM_LOCK;
  Sim& s = sim();
  if (!hQueue || (numLists && !phLists))
    return fail(ZE_RESULT_ERROR_INVALID_NULL_HANDLE, "zeCommandQueueExecuteCommandLists: NULL argument");
  if (hQueue->hung) return fail(ZE_RESULT_ERROR_DEVICE_LOST, "rbln: the queue is hung by an earlier command");
  if (hQueue->device->lost)
    return fail(ZE_RESULT_ERROR_DEVICE_LOST, "rbln chip " + std::to_string(hQueue->device->index) + " is lost");
  hQueue->status = ZE_RESULT_SUCCESS;
  try {
    for (uint32_t i = 0; i < numLists; ++i) {
      if (!phLists[i]->closed)
        return fail(ZE_RESULT_ERROR_INVALID_ARGUMENT, "zeCommandQueueExecuteCommandLists: list is not closed");
      for (const Command& c : phLists[i]->cmds) {
        if (hQueue->hung) return ZE_RESULT_SUCCESS;  // later commands wait behind the hung one
        if (const auto* cp = std::get_if<CopyCmd>(&c)) {
          if (cp->size) std::memmove(cp->dst, cp->src, cp->size);
        } else if (const auto* sg = std::get_if<SignalCmd>(&c)) {
          sg->event->state = 1;
        } else {
          const ze_result_t r = execute_graph(s, hQueue, std::get<GraphCmd>(c));
          if (r != ZE_RESULT_SUCCESS) {
            hQueue->status = r;
            return ZE_RESULT_SUCCESS;  // the failure surfaces at synchronization, as on a device
          }
        }
      }
    }
    return ZE_RESULT_SUCCESS;
  }
  SIM_CATCH
}

ze_result_t zeCommandQueueSynchronize(ze_command_queue_handle_t hQueue, uint64_t timeout) {
  if (!hQueue) return fail(ZE_RESULT_ERROR_INVALID_NULL_HANDLE, "zeCommandQueueSynchronize: NULL queue");
  bool hung;
  ze_result_t status;
  {
    SIM_LOCK;
    hung = hQueue->hung;
    status = hQueue->status;
  }
  if (hung) {
    // A hung command never completes: wait out the timeout (capped so that an
    // infinite wait in a test cannot block forever) and report NOT_READY.
    const uint64_t cap_ns = 600ull * 1000000000ull;
    std::this_thread::sleep_for(std::chrono::nanoseconds(std::min(timeout, cap_ns)));
    return fail(ZE_RESULT_NOT_READY, "rbln: command did not complete within the timeout (fault injection hang_at_step)");
  }
  if (status != ZE_RESULT_SUCCESS) return status;  // message set by the failing command
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeEventPoolCreate(ze_context_handle_t, const ze_event_pool_desc_t*, uint32_t, ze_device_handle_t*,
                              ze_event_pool_handle_t* phPool) {
  if (!phPool) return fail(ZE_RESULT_ERROR_INVALID_NULL_POINTER, "zeEventPoolCreate: phEventPool is NULL");
  try {
    *phPool = std::make_unique<_ze_event_pool_handle_t>().release();
    return ZE_RESULT_SUCCESS;
  }
  SIM_CATCH
}

ze_result_t zeEventPoolDestroy(ze_event_pool_handle_t hPool) {
  std::unique_ptr<_ze_event_pool_handle_t> owned(hPool);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeEventCreate(ze_event_pool_handle_t hPool, const ze_event_desc_t*, ze_event_handle_t* phEvent) {
  if (!hPool || !phEvent) return fail(ZE_RESULT_ERROR_INVALID_NULL_POINTER, "zeEventCreate: NULL argument");
  try {
    *phEvent = std::make_unique<_ze_event_handle_t>().release();
    return ZE_RESULT_SUCCESS;
  }
  SIM_CATCH
}

ze_result_t zeEventDestroy(ze_event_handle_t hEvent) {
  std::unique_ptr<_ze_event_handle_t> owned(hEvent);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeEventQueryStatus(ze_event_handle_t hEvent) {
  if (!hEvent) return fail(ZE_RESULT_ERROR_INVALID_NULL_HANDLE, "zeEventQueryStatus: NULL event");
  const int st = hEvent->state;
  if (st == 1) return ZE_RESULT_SUCCESS;
  if (st == 3) return fail(ZE_RESULT_ERROR_DEVICE_LOST, "rbln: the command signalling this event failed");
  return ZE_RESULT_NOT_READY;
}

ze_result_t zeEventHostSynchronize(ze_event_handle_t hEvent, uint64_t timeout) {
  ze_result_t r = zeEventQueryStatus(hEvent);
  if (r != ZE_RESULT_NOT_READY) return r;
  const uint64_t cap_ns = 600ull * 1000000000ull;
  std::this_thread::sleep_for(std::chrono::nanoseconds(std::min(timeout, cap_ns)));
  return zeEventQueryStatus(hEvent);
}

// ------------------------------------------------------------ extensions

ze_result_t zeRblnSimConfigure(const ze_rbln_sim_desc_t* desc) {
  SIM_LOCK;
  try {
    return configure_locked(desc);
  }
  SIM_CATCH
}

ze_result_t zeRblnSimGetProperties(ze_rbln_sim_properties_t* p) {
  SIM_LOCK;
  if (!p) return fail(ZE_RESULT_ERROR_INVALID_NULL_POINTER, "zeRblnSimGetProperties: NULL");
  try {
    if (ze_result_t r = ensure_init(); r != ZE_RESULT_SUCCESS) return r;
  }
  SIM_CATCH
  const Profile& pr = sim().profile;
  *p = {};
  std::snprintf(p->name, sizeof(p->name), "%s", pr.name.c_str());
  std::snprintf(p->profile_path, sizeof(p->profile_path), "%s", pr.path.empty() ? "(built-in defaults)" : pr.path.c_str());
  p->num_chips = static_cast<uint32_t>(pr.chips);
  p->memory_per_chip = pr.usable_per_chip();
  p->peak_flops = pr.peak_flops;
  p->dram_bandwidth = pr.dram_bandwidth;
  p->link_bandwidth = pr.link_bandwidth;
  p->link_latency_s = pr.link_latency;
  p->sram_bytes = pr.sram_bytes;
  p->prefill_chunk_size = static_cast<uint32_t>(pr.prefill_chunk_size);
  p->command_timeout_ms = static_cast<uint32_t>(pr.command_timeout_ms);
  p->rsd = pr.rsd ? 1 : 0;
  return ZE_RESULT_SUCCESS;
}

const char* zeRblnGetLastErrorMessage(void) { return g_last_error.c_str(); }

ze_result_t zeRblnGraphCreate(ze_context_handle_t hContext, const ze_rbln_graph_desc_t* desc,
                              ze_rbln_graph_handle_t* phGraph) {
  if (!hContext || !desc || !phGraph || !desc->model || !desc->devices || !desc->weights)
    return fail(ZE_RESULT_ERROR_INVALID_NULL_POINTER, "zeRblnGraphCreate: NULL argument");
  const ze_rbln_decoder_desc_t& m = *desc->model;
  if (desc->num_devices == 0 || m.heads % desc->num_devices != 0 || m.kv_heads == 0 || m.heads % m.kv_heads != 0 ||
      !m.rope_inv_freq || desc->rows == 0 || desc->max_seq_len == 0)
    return fail(ZE_RESULT_ERROR_INVALID_ARGUMENT, "zeRblnGraphCreate: inconsistent graph descriptor");
  if (!graph_kind_ok(*desc))
    return fail(ZE_RESULT_ERROR_INVALID_ARGUMENT,
                "zeRblnGraphCreate: unknown graph kind or rows not a multiple of tokens_per_seq");
  if (desc->num_devices > 1 && !sim().profile.rsd)
    return fail(ZE_RESULT_ERROR_UNSUPPORTED_FEATURE, "zeRblnGraphCreate: this device profile has no RSD link");
  try {
    auto g = std::make_unique<_ze_rbln_graph_handle_t>();
    g->model = m;
    g->inv_freq.assign(m.rope_inv_freq, m.rope_inv_freq + m.head_dim / 2);
    g->model.rope_inv_freq = g->inv_freq.data();
    g->kind = desc->kind;
    g->rows = desc->rows;
    g->max_seq_len = desc->max_seq_len;
    g->tokens_per_seq = std::max<uint32_t>(1, desc->tokens_per_seq);
    g->devices.assign(desc->devices, desc->devices + desc->num_devices);
    const size_t n = size_t{desc->num_devices} * ze_rbln_num_weight_slots(m.layers);
    g->weights.assign(desc->weights, desc->weights + n);
    *phGraph = g.release();
    return ZE_RESULT_SUCCESS;
  }
  SIM_CATCH
}

ze_result_t zeRblnGraphDestroy(ze_rbln_graph_handle_t hGraph) {
  std::unique_ptr<_ze_rbln_graph_handle_t> owned(hGraph);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeRblnCommandListAppendGraphExecute(ze_command_list_handle_t hList, ze_rbln_graph_handle_t hGraph,
                                                const ze_rbln_graph_args_t* a, ze_event_handle_t hSignal, uint32_t,
                                                ze_event_handle_t*) {
  if (!hList || !hGraph) return fail(ZE_RESULT_ERROR_INVALID_NULL_HANDLE, "zeRblnCommandListAppendGraphExecute: NULL handle");
  if (!a || !a->token_ids || !a->positions || !a->slots || !a->ctx_lens || !a->block_ids || !a->kv ||
      (a->num_logits && (!a->logits_rows || !a->logits)))
    return fail(ZE_RESULT_ERROR_INVALID_NULL_POINTER, "zeRblnCommandListAppendGraphExecute: NULL argument");
  const uint32_t R = hGraph->rows;
  for (uint32_t r = 0; r < R; ++r) {
    if (a->token_ids[r] < 0 || static_cast<uint32_t>(a->token_ids[r]) >= hGraph->model.vocab ||
        a->ctx_lens[r] < 0 || static_cast<uint32_t>(a->ctx_lens[r]) > hGraph->max_seq_len ||
        (a->ctx_lens[r] > 0 && (a->block_ids[r] < 0 || static_cast<uint32_t>(a->block_ids[r]) >= a->kv_num_blocks)) ||
        a->slots[r] < -1 || a->slots[r] >= int64_t{a->kv_num_blocks} * hGraph->max_seq_len)
      return fail(ZE_RESULT_ERROR_INVALID_ARGUMENT,
                  "zeRblnCommandListAppendGraphExecute: row " + std::to_string(r) + " is out of the graph's static shape");
  }
  for (uint32_t i = 0; i < a->num_logits; ++i)
    if (a->logits_rows[i] < 0 || static_cast<uint32_t>(a->logits_rows[i]) >= R)
      return fail(ZE_RESULT_ERROR_INVALID_ARGUMENT, "zeRblnCommandListAppendGraphExecute: logits row out of range");
  try {
    GraphCmd g;
    g.graph = hGraph;
    g.tokens.assign(a->token_ids, a->token_ids + R);
    g.positions.assign(a->positions, a->positions + R);
    g.slots.assign(a->slots, a->slots + R);
    g.ctx.assign(a->ctx_lens, a->ctx_lens + R);
    g.blocks.assign(a->block_ids, a->block_ids + R);
    g.logits_rows.assign(a->logits_rows, a->logits_rows + a->num_logits);
    g.kv.assign(a->kv, a->kv + hGraph->devices.size() * hGraph->model.layers * 2);
    g.kv_num_blocks = a->kv_num_blocks;
    g.logits = a->logits;
    g.signal = hSignal;
    hList->cmds.emplace_back(std::move(g));
    return ZE_RESULT_SUCCESS;
  }
  SIM_CATCH
}

ze_result_t zeRblnGraphEstimate(const ze_rbln_graph_desc_t* desc, const int32_t* ctx_lens, uint32_t num_logits,
                                ze_rbln_cost_t* cost) {
  SIM_LOCK;
  if (!desc || !desc->model || !cost) return fail(ZE_RESULT_ERROR_INVALID_NULL_POINTER, "zeRblnGraphEstimate: NULL argument");
  if (!graph_kind_ok(*desc))
    return fail(ZE_RESULT_ERROR_INVALID_ARGUMENT,
                "zeRblnGraphEstimate: unknown graph kind or rows not a multiple of tokens_per_seq");
  try {
    if (ze_result_t r = ensure_init(); r != ZE_RESULT_SUCCESS) return r;
    *cost = estimate(sim().profile, *desc, ctx_lens, num_logits);
    return ZE_RESULT_SUCCESS;
  }
  SIM_CATCH
}

ze_result_t zeRblnDeviceGetClock(ze_device_handle_t hDevice, ze_rbln_clock_t* clock) {
  SIM_LOCK;
  if (!hDevice || !clock) return fail(ZE_RESULT_ERROR_INVALID_NULL_POINTER, "zeRblnDeviceGetClock: NULL argument");
  *clock = hDevice->clock;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeRblnDeviceGetMemoryUsage(ze_device_handle_t hDevice, uint64_t* used, uint64_t* capacity) {
  SIM_LOCK;
  if (!hDevice || !used || !capacity) return fail(ZE_RESULT_ERROR_INVALID_NULL_POINTER, "zeRblnDeviceGetMemoryUsage: NULL argument");
  *used = hDevice->used;
  *capacity = sim().profile.usable_per_chip();
  return ZE_RESULT_SUCCESS;
}

}  // extern "C"
