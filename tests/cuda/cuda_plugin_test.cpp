// The CUDA plugin artifact, loaded with dlopen as the core does. On a
// machine without a GPU (or without a driver) it must load and report the
// reason through the ABI; where a GPU is present its logits are compared with
// the double-precision reference forward pass of tests/cpu (which the CPU
// plugin is tested against).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>

#include "halo/kernels/dtype.h"
#include "reference_model.h"

namespace {

const halo_plugin_api* cuda_api() {
  static const halo_plugin_api* table = [] {
    void* h = dlopen(HALO_CUDA_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return static_cast<const halo_plugin_api*>(nullptr);
    auto get = reinterpret_cast<halo_plugin_get_api_fn>(dlsym(h, HALO_PLUGIN_ENTRY_SYMBOL));
    return get ? get() : nullptr;
  }();
  return table;
}

struct St {
  halo_status_code code = HALO_STATUS_OK;
  std::string message;
};
St take(halo_error* e) {
  St s;
  if (!e) return s;
  s.code = cuda_api()->error_code(e);
  s.message = cuda_api()->error_message(e);
  cuda_api()->error_destroy(e);
  return s;
}

// Number of GPUs, or -1 with the plugin's reason.
int gpu_count(std::string* reason) {
  halo_device_count_args c{};
  c.struct_size = sizeof c;
  const St s = take(cuda_api()->device_count(&c));
  if (s.code != HALO_STATUS_OK) {
    *reason = s.message;
    return -1;
  }
  return c.count;
}

TEST(CudaPlugin, LoadsWithoutGpuAndHasTable) {
  void* h = dlopen(HALO_CUDA_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  const halo_plugin_api* a = cuda_api();
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->abi_major, HALO_ABI_VERSION_MAJOR);
  EXPECT_EQ(a->struct_size, sizeof(halo_plugin_api));
  EXPECT_STREQ(a->plugin_name, "cuda");
  EXPECT_TRUE(a->device_count && a->device_get_properties && a->device_open && a->prepare && a->execute &&
              a->kv_cache_create && a->kv_cache_copy_blocks && a->buffer_from_host && a->buffer_to_host);
  EXPECT_NE(a->lora_slot_set, nullptr);  // v1.6: HALO_CAP_LORA
  a->error_destroy(nullptr);
  a->device_destroy(nullptr);
  a->executable_destroy(nullptr);
  a->kv_cache_destroy(nullptr);
  a->buffer_destroy(nullptr);
}

TEST(CudaPlugin, NoDeviceIsAClearErrorOrDevicesAreReal) {
  std::string reason;
  const int n = gpu_count(&reason);
  halo_device_properties p{};
  p.struct_size = sizeof p;
  halo_device_get_properties_args g{};
  g.struct_size = sizeof g;
  g.properties = &p;
  halo_device_open_args o{};
  o.struct_size = sizeof o;
  if (n < 0) {
    std::printf("cuda plugin without a device: %s\n", reason.c_str());
    EXPECT_NE(reason.find("device_count: cuda: no device ("), std::string::npos) << reason;
    EXPECT_NE(reason.find("cudaGetDeviceCount"), std::string::npos) << reason;
    const St ps = take(cuda_api()->device_get_properties(&g));
    EXPECT_EQ(ps.code, HALO_STATUS_FAILED_PRECONDITION);
    EXPECT_NE(ps.message.find("no device"), std::string::npos) << ps.message;
    const St os = take(cuda_api()->device_open(&o));
    EXPECT_EQ(os.code, HALO_STATUS_FAILED_PRECONDITION);
    EXPECT_NE(os.message.find("device_open: cuda: no device ("), std::string::npos) << os.message;
    EXPECT_EQ(o.device, nullptr);
    return;
  }
  ASSERT_GT(n, 0);
  ASSERT_EQ(take(cuda_api()->device_get_properties(&g)).code, HALO_STATUS_OK);
  EXPECT_EQ(p.kind, HALO_DEVICE_KIND_GPU);
  EXPECT_NE(std::string(p.name).find("sm_"), std::string::npos) << p.name;
  EXPECT_GT(p.memory_bytes, 0u);
  EXPECT_EQ(p.capabilities, HALO_CAP_DTYPE_BF16 | HALO_CAP_DTYPE_FP16 | HALO_CAP_CHUNKED_PREFILL |
                                HALO_CAP_MIXED_BATCH | HALO_CAP_BUFFERS | HALO_CAP_TENSOR_PARALLEL |
                                HALO_CAP_HIDDEN_STATES | HALO_CAP_LORA);
  g.device_index = n;
  EXPECT_EQ(take(cuda_api()->device_get_properties(&g)).code, HALO_STATUS_OUT_OF_RANGE);
}

TEST(CudaPlugin, ArgumentErrorsNeedNoDevice) {
  EXPECT_EQ(take(cuda_api()->device_count(nullptr)).code, HALO_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(take(cuda_api()->execute(nullptr)).code, HALO_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(take(cuda_api()->lora_slot_set(nullptr)).code, HALO_STATUS_INVALID_ARGUMENT);
  halo_lora_slot_args ls{};
  ls.struct_size = sizeof ls;
  EXPECT_EQ(take(cuda_api()->lora_slot_set(&ls)).code,
            HALO_STATUS_INVALID_ARGUMENT);  // no executable
  halo_execute_args e{};
  e.struct_size = sizeof e;
  const St s = take(cuda_api()->execute(&e));
  EXPECT_EQ(s.code, HALO_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(s.message, "execute: executable is NULL");
}

// ------------------------------------------------------- on a real GPU only

// Quantized projections of a TestModel (ABI v1.4 layout, fp16 scales): int8
// symmetric or uint4 with offsets (min/max per group). The reference's values
// become the dequantized ones, so the GPU's logits are compared with the
// model the plugin was given.
struct QuantizedModel {
  struct Entry {
    std::vector<uint8_t> values;
    std::vector<uint16_t> scales, offsets;
    int64_t vshape[2], sshape[2];
    DLTensor v{}, s{}, o{};
  };
  std::vector<std::unique_ptr<Entry>> entries;
  std::vector<halo_quantized_tensor> quantized;
  std::vector<halo_named_tensor> plain;
};

DLTensor host_2d(void* data, int64_t* shape, DLDataType dt) {
  DLTensor d{};
  d.data = data;
  d.device = {kDLCPU, 0};
  d.ndim = 2;
  d.dtype = dt;
  d.shape = shape;
  return d;
}

// Quantizes one [rows, cols] weight; returns its dequantized values.
std::vector<float> quantize_into(QuantizedModel::Entry& e, const std::vector<float>& w,
                                 int64_t rows, int64_t cols, int32_t type, int32_t group) {
  namespace hk = halo::kernels;
  const bool nib = type == HALO_QUANT_UINT4;
  const int64_t G = cols / group;
  e.values.assign(static_cast<size_t>(rows * (nib ? cols / 2 : cols)), 0);
  e.scales.resize(static_cast<size_t>(rows * G));
  e.offsets.resize(e.scales.size());
  std::vector<float> deq(w.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const float* x = &w[static_cast<size_t>(r * cols + g * group)];
      const auto [lo, hi] = std::minmax_element(x, x + group);
      const float amax = std::max(std::fabs(*lo), std::fabs(*hi));
      const size_t gi = static_cast<size_t>(r * G + g);
      e.scales[gi] =
          hk::f32_to_f16(nib ? std::max(*hi - *lo, 1e-6f) / 15.f : std::max(amax, 1e-6f) / 127.f);
      e.offsets[gi] = hk::f32_to_f16(nib ? *lo : 0.f);
      const float s = hk::f16_to_f32(e.scales[gi]), o = hk::f16_to_f32(e.offsets[gi]);
      for (int32_t i = 0; i < group; ++i) {
        const size_t at = static_cast<size_t>(r * cols + g * group + i);
        const int q = nib ? std::clamp(static_cast<int>(std::lround((x[i] - o) / s)), 0, 15)
                          : std::clamp(static_cast<int>(std::lround(x[i] / s)), -128, 127);
        if (nib)
          e.values[at / 2] |= static_cast<uint8_t>(q << (4 * (at % 2)));
        else
          e.values[at] = static_cast<uint8_t>(static_cast<int8_t>(q));
        deq[at] = s * static_cast<float>(q) + o;
      }
    }
  e.vshape[0] = rows, e.vshape[1] = nib ? cols / 2 : cols, e.sshape[0] = rows, e.sshape[1] = G;
  e.v = host_2d(e.values.data(), e.vshape,
                nib ? DLDataType{kDLUInt, 8, 1} : DLDataType{kDLInt, 8, 1});
  e.s = host_2d(e.scales.data(), e.sshape, DLDataType{kDLFloat, 16, 1});
  e.o = host_2d(e.offsets.data(), e.sshape, DLDataType{kDLFloat, 16, 1});
  return deq;
}

// group 0: per output channel.
QuantizedModel quantize_model(halo::test::TestModel& m, int32_t type, int32_t group) {
  QuantizedModel qm;
  for (const halo_named_tensor& t : m.named) {
    const std::string name = t.name;
    const bool proj = name.find("_proj") != std::string::npos || name == HALO_WEIGHT_LM_HEAD;
    if (!proj) {
      qm.plain.push_back(t);
      continue;
    }
    const auto& tensor = m.tensor(name);
    const int64_t rows = tensor.shape[0], cols = tensor.shape[1];
    const int32_t g = group ? group : static_cast<int32_t>(cols);
    qm.entries.push_back(std::make_unique<QuantizedModel::Entry>());
    QuantizedModel::Entry& e = *qm.entries.back();
    m.set_reference_values(name, quantize_into(e, m.w(name), rows, cols, type, g));
    qm.quantized.push_back(
        {t.name, type, g, rows, cols, &e.v, &e.s, type == HALO_QUANT_UINT4 ? &e.o : nullptr});
  }
  return qm;
}

struct QuantRequest {
  int32_t type = HALO_QUANT_NONE;
  int32_t group = 0;
};

void run_model_on_gpu(const halo::test::Config& cfg, bool graphs, double tol,
                      QuantRequest qr = {}) {
  using namespace halo::test;
  TestModel m(cfg);
  const QuantizedModel qm = qr.type ? quantize_model(m, qr.type, qr.group) : QuantizedModel{};
  halo_option opt{"cuda_graphs", graphs ? "1" : "0"};
  halo_device_open_args o{};
  o.struct_size = sizeof o;
  o.options = &opt;
  o.num_options = 1;
  ASSERT_EQ(take(cuda_api()->device_open(&o)).code, HALO_STATUS_OK);
  halo_limits lim{};
  lim.struct_size = sizeof lim;
  lim.block_size = 16;
  lim.max_num_seqs = 8;
  lim.max_model_len = 256;
  halo_prepare_args pa{};
  pa.struct_size = sizeof pa;
  pa.device = o.device;
  pa.spec = &m.spec;
  pa.weights = qr.type ? qm.plain.data() : m.named.data();
  pa.num_weights = qr.type ? qm.plain.size() : m.named.size();
  pa.quantized_weights = qm.quantized.data();
  pa.num_quantized_weights = qm.quantized.size();
  pa.limits = &lim;
  const St ps = take(cuda_api()->prepare(&pa));
  ASSERT_EQ(ps.code, HALO_STATUS_OK) << ps.message;
  halo_kv_cache_create_args ka{};
  ka.struct_size = sizeof ka;
  ka.executable = pa.executable;
  ka.num_blocks = 64;
  ka.block_size = 16;
  ASSERT_EQ(take(cuda_api()->kv_cache_create(&ka)).code, HALO_STATUS_OK);

  // One sequence: a 37-token prompt in chunks of 20 and 17 (all logits), then 4 decode steps.
  const std::vector<int> tokens = random_tokens(41, cfg.vocab, 5);
  std::vector<int> positions(tokens.size());
  std::iota(positions.begin(), positions.end(), 0);
  const auto ref = reference_forward(m, tokens, positions);
  std::vector<int32_t> table{7, 3, 12};  // 41 tokens -> 3 blocks
  int done = 0;
  for (int n : {20, 17, 1, 1, 1, 1}) {
    std::vector<int32_t> ids(tokens.begin() + done, tokens.begin() + done + n), pos(positions.begin() + done,
                                                                                   positions.begin() + done + n);
    std::vector<int64_t> slots(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) slots[i] = int64_t{table[(done + i) / 16]} * 16 + (done + i) % 16;
    std::vector<int32_t> qs{0, n}, ctx{done + n}, lidx(static_cast<size_t>(n));
    std::iota(lidx.begin(), lidx.end(), 0);
    std::vector<float> logits(static_cast<size_t>(n) * cfg.vocab);
    int64_t shape[2] = {n, cfg.vocab};
    DLTensor lt{};
    lt.data = logits.data();
    lt.device = {kDLCPU, 0};
    lt.ndim = 2;
    lt.dtype = {kDLFloat, 32, 1};
    lt.shape = shape;
    halo_execute_args e{};
    e.struct_size = sizeof e;
    e.executable = pa.executable;
    e.kv_cache = ka.kv_cache;
    e.num_tokens = n;
    e.token_ids = ids.data();
    e.positions = pos.data();
    e.slot_mapping = slots.data();
    e.num_seqs = 1;
    e.query_start = qs.data();
    e.context_lens = ctx.data();
    e.block_tables = table.data();
    e.max_blocks_per_seq = 3;
    e.num_logits = n;
    e.logits_indices = lidx.data();
    e.logits = &lt;
    const St es = take(cuda_api()->execute(&e));
    ASSERT_EQ(es.code, HALO_STATUS_OK) << es.message;
    for (int i = 0; i < n; ++i) {
      const std::vector<float> row(logits.begin() + i * cfg.vocab, logits.begin() + (i + 1) * cfg.vocab);
      EXPECT_LT(rel_err(row, ref[static_cast<size_t>(done + i)]), tol) << "token " << done + i;
    }
    done += n;
  }
  cuda_api()->kv_cache_destroy(ka.kv_cache);
  cuda_api()->executable_destroy(pa.executable);
  cuda_api()->device_destroy(o.device);
}

TEST(CudaPluginGpu, LogitsMatchReferenceModel) {
  std::string reason;
  if (gpu_count(&reason) <= 0) GTEST_SKIP() << "no GPU here, so the plugin ran no kernel: " << reason;
  halo::test::Config cfg;
  cfg.heads = 8, cfg.kv_heads = 2, cfg.head_dim = 16, cfg.hidden = 64;
  cfg.wt = halo::test::WeightType::BF16;
  cfg.scaling = HALO_ROPE_SCALING_LLAMA3, cfg.factor = 8.f, cfg.low = 1.f, cfg.high = 4.f, cfg.orig_max = 16;
  for (bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "graphs" : "eager");
    run_model_on_gpu(cfg, graphs, 3e-2);
    cfg.flags = HALO_MODEL_QKV_BIAS | HALO_MODEL_QK_NORM | HALO_MODEL_TIED_EMBEDDINGS;
    cfg.wt = halo::test::WeightType::F16;
    run_model_on_gpu(cfg, graphs, 3e-2);
  }
}

// A sequence of a GPU test: its tokens, block table, the tokens computed so
// far and the reference logits of every position.
struct GpuSeq {
  std::vector<int> tokens;
  std::vector<int32_t> table;
  int done = 0;
  std::vector<std::vector<double>> ref;
};

// One execute() over entries (sequence, new tokens), logits of every row
// asked in reverse order, with hidden_states: each row against the reference
// and logits against hidden x lm_head^T.
void gpu_step(halo_executable* exe, halo_kv_cache* kv, const halo::test::TestModel& m,
              std::vector<GpuSeq>& seqs, const std::vector<std::pair<int, int>>& entries) {
  const int V = m.cfg.vocab, H = m.cfg.hidden, mb = 3;
  std::vector<int32_t> ids, pos, qs{0}, ctx, bt, lidx;
  std::vector<int64_t> slots;
  std::vector<std::pair<int, int>> row_of;  // (sequence, position) of each flat row
  for (auto [s, n] : entries) {
    GpuSeq& q = seqs[static_cast<size_t>(s)];
    for (int i = 0; i < n; ++i) {
      const int p = q.done + i;
      ids.push_back(q.tokens[static_cast<size_t>(p)]), pos.push_back(p);
      slots.push_back(int64_t{q.table[static_cast<size_t>(p / 16)]} * 16 + p % 16);
      row_of.push_back({s, p});
    }
    q.done += n;
    qs.push_back(static_cast<int32_t>(ids.size())), ctx.push_back(q.done);
    bt.insert(bt.end(), q.table.begin(), q.table.end());
  }
  const int T = static_cast<int>(ids.size());
  for (int i = 0; i < T; ++i) lidx.push_back(T - 1 - i);
  std::vector<float> logits(static_cast<size_t>(T) * V), hidden(static_cast<size_t>(T) * H);
  int64_t lshape[2] = {T, V}, hshape[2] = {T, H};
  DLTensor lt = host_2d(logits.data(), lshape, DLDataType{kDLFloat, 32, 1});
  DLTensor ht = host_2d(hidden.data(), hshape, DLDataType{kDLFloat, 32, 1});
  halo_execute_args e{};
  e.struct_size = sizeof e;
  e.executable = exe, e.kv_cache = kv, e.num_tokens = T;
  e.token_ids = ids.data(), e.positions = pos.data(), e.slot_mapping = slots.data();
  e.num_seqs = static_cast<int32_t>(entries.size());
  e.query_start = qs.data(), e.context_lens = ctx.data(), e.block_tables = bt.data();
  e.max_blocks_per_seq = mb, e.num_logits = T, e.logits_indices = lidx.data();
  e.logits = &lt, e.hidden_states = &ht;
  const St es = take(cuda_api()->execute(&e));
  ASSERT_EQ(es.code, HALO_STATUS_OK) << es.message;
  const std::vector<float>& lm = m.w(HALO_WEIGHT_LM_HEAD);
  for (int i = 0; i < T; ++i) {
    const auto [s, p] = row_of[static_cast<size_t>(lidx[static_cast<size_t>(i)])];
    const std::vector<float> row(logits.begin() + i * V, logits.begin() + (i + 1) * V);
    EXPECT_LT(halo::test::rel_err(row, seqs[static_cast<size_t>(s)].ref[static_cast<size_t>(p)]),
              3e-2)
        << "sequence " << s << " position " << p;
    std::vector<double> from_hidden(static_cast<size_t>(V));
    for (int v = 0; v < V; ++v)
      for (int h = 0; h < H; ++h)
        from_hidden[static_cast<size_t>(v)] +=
            double(hidden[static_cast<size_t>(i * H + h)]) * lm[static_cast<size_t>(v * H + h)];
    EXPECT_LT(halo::test::rel_err(row, from_hidden), 1e-3)
        << "hidden_states of sequence " << s << " position " << p;
  }
}

// Speculative decoding (ABI v1.5): K = 4 agreed; verify steps (q = 5, q = 3
// padded to 5, a plain decode among them) replay the (B, 5) graph, then a
// decode step the (B, 1) one; every row against the reference forward, with
// graphs and eagerly, and the hidden_states rows.
void run_verify_on_gpu(bool graphs) {
  using namespace halo::test;
  Config cfg;
  cfg.heads = 8, cfg.kv_heads = 2, cfg.head_dim = 16, cfg.hidden = 64;
  cfg.wt = WeightType::BF16;
  TestModel m(cfg);
  halo_option opt{"cuda_graphs", graphs ? "1" : "0"};
  halo_device_open_args o{};
  o.struct_size = sizeof o;
  o.options = &opt;
  o.num_options = 1;
  ASSERT_EQ(take(cuda_api()->device_open(&o)).code, HALO_STATUS_OK);
  halo_limits lim{};
  lim.struct_size = sizeof lim;
  lim.block_size = 16, lim.max_num_seqs = 16, lim.max_model_len = 256;
  lim.num_speculative_tokens = 4;
  halo_prepare_args pa{};
  pa.struct_size = sizeof pa;
  pa.device = o.device, pa.spec = &m.spec, pa.weights = m.named.data();
  pa.num_weights = m.named.size(), pa.limits = &lim;
  const St ps = take(cuda_api()->prepare(&pa));
  ASSERT_EQ(ps.code, HALO_STATUS_OK) << ps.message;
  EXPECT_EQ(lim.num_speculative_tokens, 4);
  halo_kv_cache_create_args ka{};
  ka.struct_size = sizeof ka;
  ka.executable = pa.executable, ka.num_blocks = 64, ka.block_size = 16;
  ASSERT_EQ(take(cuda_api()->kv_cache_create(&ka)).code, HALO_STATUS_OK);
  std::vector<GpuSeq> seqs(3);
  const std::vector<std::vector<int32_t>> tables{{7, 3, 12}, {1, 9, 20}, {30, 5, 2}};
  for (size_t s = 0; s < 3; ++s) {
    seqs[s].tokens = random_tokens(44, cfg.vocab, static_cast<uint32_t>(11 + s));
    std::vector<int> positions(seqs[s].tokens.size());
    std::iota(positions.begin(), positions.end(), 0);
    seqs[s].ref = reference_forward(m, seqs[s].tokens, positions);
    seqs[s].table = tables[s];
  }
  gpu_step(pa.executable, ka.kv_cache, m, seqs, {{0, 20}, {1, 14}, {2, 31}});  // eager prefill
  gpu_step(pa.executable, ka.kv_cache, m, seqs, {{0, 5}, {1, 3}, {2, 1}});     // graph (3, 5)
  gpu_step(pa.executable, ka.kv_cache, m, seqs, {{0, 5}, {1, 5}, {2, 5}});     // replayed
  gpu_step(pa.executable, ka.kv_cache, m, seqs, {{0, 1}, {1, 1}, {2, 1}});     // graph (4, 1)
  gpu_step(pa.executable, ka.kv_cache, m, seqs, {{1, 2}});                     // graph (1, 5)
  cuda_api()->kv_cache_destroy(ka.kv_cache);
  cuda_api()->executable_destroy(pa.executable);
  cuda_api()->device_destroy(o.device);
}

TEST(CudaPluginGpu, VerifyStepsMatchReferenceAndReturnHiddenStates) {
  std::string reason;
  if (gpu_count(&reason) <= 0)
    GTEST_SKIP() << "no GPU here, so verify graphs ran only in host emulation: " << reason;
  for (bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "graphs" : "eager");
    run_verify_on_gpu(graphs);
  }
}

// Weight-only int8 (per channel) and uint4 (group 32, offsets) projections:
// logits against the reference forward of the dequantized model.
TEST(CudaPluginGpu, QuantizedWeightsMatchDequantizedReference) {
  std::string reason;
  if (gpu_count(&reason) <= 0)
    GTEST_SKIP() << "no GPU here, so the quantized kernels ran only in host emulation: " << reason;
  halo::test::Config cfg;
  cfg.heads = 8, cfg.kv_heads = 2, cfg.head_dim = 16, cfg.hidden = 64, cfg.inter = 96;
  cfg.wt = halo::test::WeightType::BF16;
  for (bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "graphs" : "eager");
    run_model_on_gpu(cfg, graphs, 3e-2, {HALO_QUANT_INT8, 0});
    run_model_on_gpu(cfg, graphs, 3e-2, {HALO_QUANT_UINT4, 32});
  }
}

// prepare refuses a malformed quantized weight with INVALID_ARGUMENT naming it.
TEST(CudaPluginGpu, PrepareRefusesBadQuantizedWeightByName) {
  std::string reason;
  if (gpu_count(&reason) <= 0)
    GTEST_SKIP() << "no GPU here, so prepare cannot be reached: " << reason;
  using namespace halo::test;
  halo::test::Config cfg;
  cfg.hidden = 64, cfg.inter = 96, cfg.head_dim = 16;
  TestModel m(cfg);
  QuantizedModel qm = quantize_model(m, HALO_QUANT_UINT4, 32);
  halo_device_open_args o{};
  o.struct_size = sizeof o;
  ASSERT_EQ(take(cuda_api()->device_open(&o)).code, HALO_STATUS_OK);
  halo_device_properties p{};
  p.struct_size = sizeof p;
  halo_device_get_properties_args g{};
  g.struct_size = sizeof g;
  g.properties = &p;
  ASSERT_EQ(take(cuda_api()->device_get_properties(&g)).code, HALO_STATUS_OK);
  EXPECT_EQ(p.quant_types, HALO_DTYPE_BIT(HALO_QUANT_INT8) | HALO_DTYPE_BIT(HALO_QUANT_UINT4));
  auto prepare_with = [&](int32_t group) {
    qm.quantized[3].group_size = group;
    halo_limits lim{};
    lim.struct_size = sizeof lim;
    lim.max_model_len = 64;
    halo_prepare_args pa{};
    pa.struct_size = sizeof pa;
    pa.device = o.device;
    pa.spec = &m.spec;
    pa.weights = qm.plain.data();
    pa.num_weights = qm.plain.size();
    pa.quantized_weights = qm.quantized.data();
    pa.num_quantized_weights = qm.quantized.size();
    pa.limits = &lim;
    const St s = take(cuda_api()->prepare(&pa));
    if (pa.executable) cuda_api()->executable_destroy(pa.executable);
    return s;
  };
  EXPECT_EQ(prepare_with(32).code, HALO_STATUS_OK);
  const St bad = prepare_with(24);
  EXPECT_EQ(bad.code, HALO_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(bad.message.find(std::string("'") + qm.quantized[3].name + "'"), std::string::npos)
      << bad.message;
  cuda_api()->device_destroy(o.device);
}

}  // namespace
