// The CUDA plugin artifact, loaded with dlopen as the core does. On a
// machine without a GPU (or without a driver) it must load and report the
// reason through the ABI; where a GPU is present its logits are compared with
// the double-precision reference forward pass of tests/cpu (which the CPU
// plugin is tested against).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>

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
                                HALO_CAP_MIXED_BATCH | HALO_CAP_BUFFERS);
  g.device_index = n;
  EXPECT_EQ(take(cuda_api()->device_get_properties(&g)).code, HALO_STATUS_OUT_OF_RANGE);
}

TEST(CudaPlugin, ArgumentErrorsNeedNoDevice) {
  EXPECT_EQ(take(cuda_api()->device_count(nullptr)).code, HALO_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(take(cuda_api()->execute(nullptr)).code, HALO_STATUS_INVALID_ARGUMENT);
  halo_execute_args e{};
  e.struct_size = sizeof e;
  const St s = take(cuda_api()->execute(&e));
  EXPECT_EQ(s.code, HALO_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(s.message, "execute: executable is NULL");
}

// ------------------------------------------------------- on a real GPU only

void run_model_on_gpu(const halo::test::Config& cfg, bool graphs, double tol) {
  using namespace halo::test;
  const TestModel m(cfg);
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
  pa.weights = m.named.data();
  pa.num_weights = m.named.size();
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

}  // namespace
