// Tests of the CPU plugin through its C table, loaded with dlopen.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <random>

#include "halo/kernels/dtype.h"
#include "reference_model.h"

using namespace halo::test;

namespace {

#define EXPECT_STATUS(call, want_code, substr)                                            \
  do {                                                                                    \
    const Status st_ = take(call);                                                        \
    EXPECT_EQ(st_.code, want_code) << st_.message;                                        \
    EXPECT_FALSE(st_.message.empty());                                                    \
    EXPECT_NE(st_.message.find(substr), std::string::npos) << "message: " << st_.message; \
  } while (0)

#define ASSERT_OK(call)                                 \
  do {                                                  \
    const Status st_ = take(call);                      \
    ASSERT_EQ(st_.code, HALO_STATUS_OK) << st_.message; \
  } while (0)

// ------------------------------------------------------------------ table

TEST(CpuPluginTable, EntriesAndVersion) {
  const halo_plugin_api* a = api();
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->struct_size, sizeof(halo_plugin_api));
  EXPECT_EQ(a->abi_major, HALO_ABI_VERSION_MAJOR);
  EXPECT_EQ(a->abi_minor, HALO_ABI_VERSION_MINOR);
  EXPECT_STREQ(a->plugin_name, "cpu");
  EXPECT_NE(a->plugin_version, nullptr);
  EXPECT_TRUE(a->error_code && a->error_message && a->error_destroy);
  EXPECT_TRUE(a->device_count && a->device_get_properties && a->device_open && a->device_destroy);
  EXPECT_TRUE(a->prepare && a->executable_destroy);
  EXPECT_TRUE(a->kv_cache_create && a->kv_cache_copy_blocks && a->kv_cache_destroy);
  EXPECT_TRUE(a->execute);
  EXPECT_TRUE(a->buffer_from_host && a->buffer_to_host && a->buffer_destroy);
}

TEST(CpuPluginTable, DestroyToleratesNull) {
  api()->error_destroy(nullptr);
  api()->device_destroy(nullptr);
  api()->executable_destroy(nullptr);
  api()->kv_cache_destroy(nullptr);
  api()->buffer_destroy(nullptr);
}

// ---------------------------------------------------------------- devices

TEST(CpuPluginDevice, CountAndProperties) {
  halo_device_count_args c{};
  c.struct_size = sizeof c;
  ASSERT_OK(api()->device_count(&c));
  EXPECT_EQ(c.count, 1);

  halo_device_properties p{};
  p.struct_size = sizeof p;
  halo_device_get_properties_args g{};
  g.struct_size = sizeof g;
  g.device_index = 0;
  g.properties = &p;
  ASSERT_OK(api()->device_get_properties(&g));
  EXPECT_EQ(p.kind, HALO_DEVICE_KIND_CPU);
  EXPECT_GT(std::strlen(p.name), 0u);
  EXPECT_GT(std::strlen(p.vendor), 0u);
  EXPECT_GT(p.memory_bytes, 0u);
  EXPECT_GT(p.memory_free_bytes, 0u);
  EXPECT_LE(p.memory_free_bytes, p.memory_bytes);
  EXPECT_EQ(p.num_chips, 1);
  const uint32_t want = HALO_CAP_DTYPE_FP32 | HALO_CAP_DTYPE_BF16 | HALO_CAP_DTYPE_FP16 |
                        HALO_CAP_CHUNKED_PREFILL | HALO_CAP_MIXED_BATCH | HALO_CAP_BUFFERS |
                        HALO_CAP_HIDDEN_STATES | HALO_CAP_LORA;
  EXPECT_EQ(p.capabilities, want);
  EXPECT_EQ(p.max_batch_size, 0);
  EXPECT_EQ(p.required_block_size, 0);
  EXPECT_EQ(p.max_model_len, 0);
  // v1.3 device facts: an fp32 or bf16 KV cache; the option dtype takes float32 and bfloat16.
  EXPECT_EQ(p.kv_cache_dtypes, HALO_DTYPE_BIT(HALO_KV_DTYPE_FP32) | HALO_DTYPE_BIT(HALO_KV_DTYPE_BF16));
  EXPECT_EQ(p.compute_dtypes, HALO_DTYPE_BIT(HALO_COMPUTE_DTYPE_FP32) | HALO_DTYPE_BIT(HALO_COMPUTE_DTYPE_BF16));
  // v1.4: int8 and uint4 quantized weights.
  EXPECT_EQ(p.quant_types, HALO_DTYPE_BIT(HALO_QUANT_INT8) | HALO_DTYPE_BIT(HALO_QUANT_UINT4));
  EXPECT_EQ(p.struct_size, sizeof p);
}

TEST(CpuPluginDevice, PropertiesHonourSmallerStructSize) {
  halo_device_properties p;
  std::memset(&p, 0xAB, sizeof p);
  const size_t small = HALO_STRUCT_SIZE(halo_device_properties, num_chips);
  p.struct_size = small;
  halo_device_get_properties_args g{};
  g.struct_size = sizeof g;
  g.properties = &p;
  ASSERT_OK(api()->device_get_properties(&g));
  EXPECT_EQ(p.struct_size, small);
  EXPECT_EQ(p.kind, HALO_DEVICE_KIND_CPU);
  EXPECT_EQ(p.num_chips, 1);
  const auto* bytes = reinterpret_cast<const unsigned char*>(&p);
  for (size_t i = small; i < sizeof p; ++i)
    ASSERT_EQ(bytes[i], 0xAB) << "byte " << i << " was written";
}

TEST(CpuPluginDevice, OpenWithThreadsOption) {
  for (const char* t : {"1", "2", "3"}) {
    halo_option o{"threads", t};
    halo_option for_prepare{"kernels", "reference"};  // prepare's key: accepted, unread
    halo_option opts[2] = {for_prepare, o};
    halo_device_open_args a{};
    a.struct_size = sizeof a;
    a.options = opts;
    a.num_options = 2;
    ASSERT_OK(api()->device_open(&a));
    ASSERT_NE(a.device, nullptr);
    api()->device_destroy(a.device);
  }
  // ABI v1.3: a key the plugin takes nowhere is refused by name.
  halo_option opts[2] = {{"no-such-key", "x"}, {"threads", "1"}};
  halo_device_open_args a{};
  a.struct_size = sizeof a;
  a.options = opts;
  a.num_options = 2;
  EXPECT_STATUS(api()->device_open(&a), HALO_STATUS_INVALID_ARGUMENT, "unknown option 'no-such-key'");
}

// ----------------------------------------------------------------- errors

TEST(CpuPluginErrors, NullArgsAndStructSize) {
  EXPECT_STATUS(api()->device_count(nullptr), HALO_STATUS_INVALID_ARGUMENT, "NULL");
  halo_device_count_args c{};
  c.struct_size = 0;
  EXPECT_STATUS(api()->device_count(&c), HALO_STATUS_INVALID_ARGUMENT, "struct_size=0");
  EXPECT_STATUS(api()->device_get_properties(nullptr), HALO_STATUS_INVALID_ARGUMENT, "NULL");
  EXPECT_STATUS(api()->device_open(nullptr), HALO_STATUS_INVALID_ARGUMENT, "NULL");
  EXPECT_STATUS(api()->prepare(nullptr), HALO_STATUS_INVALID_ARGUMENT, "NULL");
  EXPECT_STATUS(api()->kv_cache_create(nullptr), HALO_STATUS_INVALID_ARGUMENT, "NULL");
  EXPECT_STATUS(api()->kv_cache_copy_blocks(nullptr), HALO_STATUS_INVALID_ARGUMENT, "NULL");
  EXPECT_STATUS(api()->execute(nullptr), HALO_STATUS_INVALID_ARGUMENT, "NULL");
  EXPECT_STATUS(api()->buffer_from_host(nullptr), HALO_STATUS_INVALID_ARGUMENT, "NULL");
  EXPECT_STATUS(api()->buffer_to_host(nullptr), HALO_STATUS_INVALID_ARGUMENT, "NULL");

  halo_device_properties p{};
  p.struct_size = sizeof p;
  halo_device_get_properties_args g{};
  g.struct_size = sizeof g;
  g.properties = nullptr;
  EXPECT_STATUS(api()->device_get_properties(&g), HALO_STATUS_INVALID_ARGUMENT, "properties");
  g.properties = &p;
  p.struct_size = 0;
  EXPECT_STATUS(api()->device_get_properties(&g), HALO_STATUS_INVALID_ARGUMENT, "struct_size=0");
  p.struct_size = sizeof p;
  g.struct_size = 4;
  EXPECT_STATUS(api()->device_get_properties(&g), HALO_STATUS_INVALID_ARGUMENT, "struct_size=4");
}

TEST(CpuPluginErrors, DeviceIndexAndOptions) {
  halo_device_properties p{};
  p.struct_size = sizeof p;
  halo_device_get_properties_args g{};
  g.struct_size = sizeof g;
  g.properties = &p;
  g.device_index = 1;
  EXPECT_STATUS(api()->device_get_properties(&g), HALO_STATUS_OUT_OF_RANGE, "device_index=1");
  g.device_index = -1;
  EXPECT_STATUS(api()->device_get_properties(&g), HALO_STATUS_OUT_OF_RANGE, "device_index=-1");

  halo_device_open_args a{};
  a.struct_size = sizeof a;
  a.device_index = 2;
  EXPECT_STATUS(api()->device_open(&a), HALO_STATUS_OUT_OF_RANGE, "device_index=2");
  a.device_index = 0;
  for (const char* bad : {"abc", "0", "-1", "", "2x"}) {
    halo_option o{"threads", bad};
    a.options = &o;
    a.num_options = 1;
    EXPECT_STATUS(api()->device_open(&a), HALO_STATUS_INVALID_ARGUMENT, "threads");
  }
}

struct PrepareFixture : ::testing::Test {
  Config cfg;
  Device dev = open_device(1);
  Status prepare(const TestModel& m, const halo_named_tensor* w, size_t n, halo_model_spec spec,
                 halo_limits* limits_out = nullptr, int32_t kv_dtype = HALO_KV_DTYPE_AUTO,
                 std::vector<halo_option> options = {}) {
    halo_limits lim{};
    lim.struct_size = sizeof lim;
    lim.kv_cache_dtype = kv_dtype;
    if (limits_out && limits_out->struct_size == sizeof lim) {  // v1.6: a LoRA proposal
      lim.max_loras = limits_out->max_loras;
      lim.max_lora_rank = limits_out->max_lora_rank;
    }
    halo_prepare_args p{};
    p.struct_size = sizeof p;
    p.device = dev.get();
    p.spec = &spec;
    p.weights = w;
    p.num_weights = n;
    p.limits = &lim;
    p.options = options.data();
    p.num_options = options.size();
    (void)m;
    Status s = take(api()->prepare(&p));
    Exec e(p.executable);
    if (s.code == HALO_STATUS_OK) {
      EXPECT_NE(p.executable, nullptr);
    }
    if (limits_out) *limits_out = lim;
    return s;
  }
};

TEST_F(PrepareFixture, BadSpec) {
  TestModel m(cfg);
  struct Case {
    const char* what;
    void (*edit)(halo_model_spec&);
    halo_status_code code;
    const char* substr;
  };
  const Case cases[] = {
      {"vocab", [](halo_model_spec& s) { s.vocab_size = 0; }, HALO_STATUS_INVALID_ARGUMENT,
       "vocab_size=0"},
      {"hidden", [](halo_model_spec& s) { s.hidden_size = -4; }, HALO_STATUS_INVALID_ARGUMENT,
       "hidden_size=-4"},
      {"layers", [](halo_model_spec& s) { s.num_layers = 0; }, HALO_STATUS_INVALID_ARGUMENT,
       "num_layers=0"},
      {"gqa", [](halo_model_spec& s) { s.num_kv_heads = 3; }, HALO_STATUS_INVALID_ARGUMENT,
       "num_kv_heads=3"},
      {"head_dim", [](halo_model_spec& s) { s.head_dim = 9; }, HALO_STATUS_INVALID_ARGUMENT,
       "head_dim=9"},
      {"eps", [](halo_model_spec& s) { s.rms_norm_eps = 0; }, HALO_STATUS_INVALID_ARGUMENT,
       "rms_norm_eps"},
      {"theta", [](halo_model_spec& s) { s.rope_theta = -1; }, HALO_STATUS_INVALID_ARGUMENT,
       "rope_theta"},
      {"scaling",
       [](halo_model_spec& s) {
         const int v = 7;
         std::memcpy(&s.rope_scaling, &v, sizeof v);
       },
       HALO_STATUS_UNIMPLEMENTED, "rope_scaling=7"},
      {"llama3",
       [](halo_model_spec& s) {
         s.rope_scaling = HALO_ROPE_SCALING_LLAMA3;
         s.rope_factor = 8;
         s.rope_low_freq_factor = 4;
         s.rope_high_freq_factor = 1;
       },
       HALO_STATUS_INVALID_ARGUMENT, "rope_low_freq_factor"},
      {"linear",
       [](halo_model_spec& s) {
         s.rope_scaling = HALO_ROPE_SCALING_LINEAR;
         s.rope_factor = 0;
       },
       HALO_STATUS_INVALID_ARGUMENT, "rope_factor=0"},
      {"activation",
       [](halo_model_spec& s) {
         const int v = 9;
         std::memcpy(&s.activation, &v, sizeof v);
       },
       HALO_STATUS_UNIMPLEMENTED, "activation=9"},
      {"flags", [](halo_model_spec& s) { s.flags = 1u << 20; }, HALO_STATUS_UNIMPLEMENTED, "flags"},
      {"struct_size", [](halo_model_spec& s) { s.struct_size = 8; }, HALO_STATUS_INVALID_ARGUMENT,
       "struct_size=8"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    halo_model_spec s = m.spec;
    c.edit(s);
    const Status st = prepare(m, m.named.data(), m.named.size(), s);
    EXPECT_EQ(st.code, c.code) << st.message;
    EXPECT_NE(st.message.find(c.substr), std::string::npos) << st.message;
  }
  // A NULL spec and a NULL limits pointer.
  halo_prepare_args p{};
  p.struct_size = sizeof p;
  p.device = dev.get();
  EXPECT_STATUS(api()->prepare(&p), HALO_STATUS_INVALID_ARGUMENT, "spec");
  p.spec = &m.spec;
  p.weights = m.named.data();
  p.num_weights = m.named.size();
  EXPECT_STATUS(api()->prepare(&p), HALO_STATUS_INVALID_ARGUMENT, "limits");
  halo_limits lim{};
  lim.struct_size = sizeof lim;
  lim.block_size = -16;
  p.limits = &lim;
  EXPECT_STATUS(api()->prepare(&p), HALO_STATUS_INVALID_ARGUMENT, "block_size=-16");
  p.device = nullptr;
  EXPECT_STATUS(api()->prepare(&p), HALO_STATUS_INVALID_ARGUMENT, "device");
}

TEST_F(PrepareFixture, BadWeights) {
  TestModel m(cfg);
  // Missing.
  {
    std::vector<halo_named_tensor> w;
    for (auto& t : m.named)
      if (std::string(t.name) != "layers.1.up_proj") w.push_back(t);
    const Status s = prepare(m, w.data(), w.size(), m.spec);
    EXPECT_EQ(s.code, HALO_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(s.message.find("'layers.1.up_proj' is missing"), std::string::npos) << s.message;
  }
  // Wrong shape.
  {
    std::vector<halo_named_tensor> w = m.named;
    DLTensor bad = *m.dl("layers.0.k_proj");
    int64_t shape[2] = {16, 40};
    bad.shape = shape;
    for (auto& t : w)
      if (std::string(t.name) == "layers.0.k_proj") t.tensor = &bad;
    const Status s = prepare(m, w.data(), w.size(), m.spec);
    EXPECT_EQ(s.code, HALO_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(s.message.find("'layers.0.k_proj' has shape [16, 40], expected [40, 40]"),
              std::string::npos)
        << s.message;
  }
  // Wrong dtype, wrong device, non-contiguous strides, NULL tensor, duplicate.
  auto with = [&](const char* name, DLTensor t) {
    std::vector<halo_named_tensor> w = m.named;
    static DLTensor keep;
    keep = t;
    for (auto& e : w)
      if (std::string(e.name) == name) e.tensor = &keep;
    return prepare(m, w.data(), w.size(), m.spec);
  };
  DLTensor t = *m.dl("final_norm");
  t.dtype = {kDLInt, 32, 1};
  Status s = with("final_norm", t);
  EXPECT_EQ(s.code, HALO_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("'final_norm' has dtype int32"), std::string::npos) << s.message;
  t = *m.dl("final_norm");
  t.device = {kDLCUDA, 0};
  s = with("final_norm", t);
  EXPECT_EQ(s.code, HALO_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("device_type=2"), std::string::npos) << s.message;
  t = *m.dl("layers.0.o_proj");
  int64_t strides[2] = {1, 40};
  t.strides = strides;
  s = with("layers.0.o_proj", t);
  EXPECT_EQ(s.code, HALO_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("not contiguous"), std::string::npos) << s.message;
  int64_t good_strides[2] = {40, 1};
  t.strides = good_strides;
  EXPECT_EQ(with("layers.0.o_proj", t).code, HALO_STATUS_OK);
  {
    std::vector<halo_named_tensor> w = m.named;
    w[3].tensor = nullptr;
    s = prepare(m, w.data(), w.size(), m.spec);
    EXPECT_EQ(s.code, HALO_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(s.message.find("tensor=NULL"), std::string::npos) << s.message;
    w = m.named;
    w.push_back(w[0]);
    s = prepare(m, w.data(), w.size(), m.spec);
    EXPECT_EQ(s.code, HALO_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(s.message.find("given twice"), std::string::npos) << s.message;
  }
  // Tied embeddings: no lm_head needed; untied: lm_head required.
  {
    Config c = cfg;
    c.flags = HALO_MODEL_QKV_BIAS;
    TestModel mb(c);
    std::vector<halo_named_tensor> w;
    for (auto& e : mb.named)
      if (std::string(e.name) != "layers.0.v_bias") w.push_back(e);
    s = prepare(mb, w.data(), w.size(), mb.spec);
    EXPECT_NE(s.message.find("'layers.0.v_bias' is missing"), std::string::npos) << s.message;
  }
}

TEST_F(PrepareFixture, NegotiatedLimits) {
  TestModel m(cfg);
  halo_limits lim{};
  ASSERT_EQ(prepare(m, m.named.data(), m.named.size(), m.spec, &lim).code, HALO_STATUS_OK);
  EXPECT_EQ(lim.max_num_seqs, 256);
  EXPECT_EQ(lim.max_model_len, cfg.max_pos);
  EXPECT_EQ(lim.max_num_batched_tokens, 2048);
  EXPECT_EQ(lim.block_size, 16);
  EXPECT_EQ(lim.capabilities, HALO_CAP_CHUNKED_PREFILL | HALO_CAP_MIXED_BATCH);
  EXPECT_EQ(lim.kv_bytes_per_block,
            2ull * cfg.layers * 16 * cfg.kv_heads * cfg.head_dim * sizeof(float));
  EXPECT_GT(lim.kv_memory_available, 0u);
}

// v1.6: LoRA slots are echoed up to 64; the rank is echoed, 0 without slots;
// a negative proposal is refused by name.
TEST_F(PrepareFixture, LoraLimitsNegotiation) {
  TestModel m(cfg);
  for (const auto& [loras, rank, want_loras, want_rank] : std::vector<std::array<int32_t, 4>>{
           {0, 0, 0, 0}, {0, 16, 0, 0}, {4, 16, 4, 16}, {1000, 8, 64, 8}}) {
    halo_limits lim{};
    lim.struct_size = sizeof lim;
    lim.max_loras = loras;
    lim.max_lora_rank = rank;
    ASSERT_EQ(prepare(m, m.named.data(), m.named.size(), m.spec, &lim).code, HALO_STATUS_OK);
    EXPECT_EQ(lim.max_loras, want_loras) << "proposed " << loras;
    EXPECT_EQ(lim.max_lora_rank, want_rank) << "proposed " << loras << " slots of rank " << rank;
  }
  halo_limits lim{};
  lim.struct_size = sizeof lim;
  lim.max_loras = -1;
  const auto s = prepare(m, m.named.data(), m.named.size(), m.spec, &lim);
  EXPECT_EQ(s.code, HALO_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("max_loras=-1"), std::string::npos) << s.message;
}

// ------------------------------------------------------- kv cache / execute

TEST_F(PrepareFixture, KvCacheDtypeNegotiation) {
  const uint64_t per_elem_block =
      2ull * cfg.layers * 16 * cfg.kv_heads * cfg.head_dim;  // K and V elements
  halo_limits lim{};
  {  // fp32 weights: auto keeps fp32
    TestModel m(cfg);
    ASSERT_EQ(prepare(m, m.named.data(), m.named.size(), m.spec, &lim).code, HALO_STATUS_OK);
    EXPECT_EQ(lim.kv_cache_dtype, HALO_KV_DTYPE_FP32);
    EXPECT_EQ(lim.kv_bytes_per_block, per_elem_block * 4);
  }
  Config c16 = cfg;
  c16.wt = WeightType::BF16;
  TestModel m(c16);
  // 16-bit weights: auto stores bf16, half the bytes.
  ASSERT_EQ(prepare(m, m.named.data(), m.named.size(), m.spec, &lim).code, HALO_STATUS_OK);
  EXPECT_EQ(lim.kv_cache_dtype, HALO_KV_DTYPE_BF16);
  EXPECT_EQ(lim.kv_bytes_per_block, per_elem_block * 2);
  // An explicit fp32 is honoured.
  ASSERT_EQ(prepare(m, m.named.data(), m.named.size(), m.spec, &lim, HALO_KV_DTYPE_FP32).code,
            HALO_STATUS_OK);
  EXPECT_EQ(lim.kv_cache_dtype, HALO_KV_DTYPE_FP32);
  EXPECT_EQ(lim.kv_bytes_per_block, per_elem_block * 4);
  // The reference kernels default to fp32 but store bf16 when asked.
  ASSERT_EQ(prepare(m, m.named.data(), m.named.size(), m.spec, &lim, HALO_KV_DTYPE_AUTO,
                    {{"kernels", "reference"}})
                .code,
            HALO_STATUS_OK);
  EXPECT_EQ(lim.kv_cache_dtype, HALO_KV_DTYPE_FP32);
  ASSERT_EQ(prepare(m, m.named.data(), m.named.size(), m.spec, &lim, HALO_KV_DTYPE_BF16,
                    {{"kernels", "reference"}})
                .code,
            HALO_STATUS_OK);
  EXPECT_EQ(lim.kv_cache_dtype, HALO_KV_DTYPE_BF16);
  // What the plugin cannot store is refused by name.
  Status st = prepare(m, m.named.data(), m.named.size(), m.spec, &lim, HALO_KV_DTYPE_FP16);
  EXPECT_EQ(st.code, HALO_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(st.message.find("fp16"), std::string::npos) << st.message;
  st = prepare(m, m.named.data(), m.named.size(), m.spec, &lim, 77);
  EXPECT_EQ(st.code, HALO_STATUS_INVALID_ARGUMENT);
  st = prepare(m, m.named.data(), m.named.size(), m.spec, &lim, HALO_KV_DTYPE_AUTO,
               {{"kernels", "turbo"}});
  EXPECT_EQ(st.code, HALO_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(st.message.find("turbo"), std::string::npos) << st.message;
}

TEST(CpuPluginErrors, KvCacheArgs) {
  TestModel m(Config{});
  Runner r(m, 1, 8, 4);
  ASSERT_TRUE(r.kv);
  halo_kv_cache_create_args k{};
  k.struct_size = sizeof k;
  k.executable = r.exec.get();
  k.num_blocks = 4;
  k.block_size = 16;
  EXPECT_STATUS(api()->kv_cache_create(&k), HALO_STATUS_INVALID_ARGUMENT,
                "block_size=16 does not match the prepared block_size=8");
  k.block_size = 8;
  k.num_blocks = 0;
  EXPECT_STATUS(api()->kv_cache_create(&k), HALO_STATUS_INVALID_ARGUMENT, "num_blocks=0");
  k.num_blocks = 1 << 30;  // far beyond the host's memory
  EXPECT_STATUS(api()->kv_cache_create(&k), HALO_STATUS_OUT_OF_MEMORY, "num_blocks=1073741824");
  k.executable = nullptr;
  EXPECT_STATUS(api()->kv_cache_create(&k), HALO_STATUS_INVALID_ARGUMENT, "executable");

  int32_t src[2] = {0, 1}, dst[2] = {2, 4};
  halo_kv_cache_copy_blocks_args c{};
  c.struct_size = sizeof c;
  c.kv_cache = r.kv.get();
  c.src_blocks = src;
  c.dst_blocks = dst;
  c.num_pairs = 2;
  EXPECT_STATUS(api()->kv_cache_copy_blocks(&c), HALO_STATUS_OUT_OF_RANGE, "dst_blocks[1]=4");
  dst[1] = 3;
  src[0] = -1;
  EXPECT_STATUS(api()->kv_cache_copy_blocks(&c), HALO_STATUS_OUT_OF_RANGE, "src_blocks[0]=-1");
  src[0] = 0;
  ASSERT_OK(api()->kv_cache_copy_blocks(&c));
  c.src_blocks = nullptr;
  EXPECT_STATUS(api()->kv_cache_copy_blocks(&c), HALO_STATUS_INVALID_ARGUMENT, "NULL");
}

struct ExecuteArgs {
  // One sequence of 5 prompt tokens, block_size 8, blocks {2}.
  std::vector<int32_t> tokens{1, 2, 3, 4, 5}, positions{0, 1, 2, 3, 4}, qs{0, 5}, ctx{5}, bt{2, -1},
      li{4};
  std::vector<int64_t> slots{16, 17, 18, 19, 20};
  std::vector<float> out;
  int64_t shape[2];
  DLTensor lt{};
  halo_execute_args a{};
  ExecuteArgs(Runner& r) : out(static_cast<size_t>(r.vocab)) {
    shape[0] = 1;
    shape[1] = r.vocab;
    lt.data = out.data();
    lt.device = {kDLCPU, 0};
    lt.ndim = 2;
    lt.dtype = {kDLFloat, 32, 1};
    lt.shape = shape;
    a.struct_size = sizeof a;
    a.executable = r.exec.get();
    a.kv_cache = r.kv.get();
    a.num_tokens = 5;
    a.token_ids = tokens.data();
    a.positions = positions.data();
    a.slot_mapping = slots.data();
    a.num_seqs = 1;
    a.query_start = qs.data();
    a.context_lens = ctx.data();
    a.block_tables = bt.data();
    a.max_blocks_per_seq = 2;
    a.num_logits = 1;
    a.logits_indices = li.data();
    a.logits = &lt;
  }
};

TEST(CpuPluginErrors, ExecuteArgs) {
  TestModel m(Config{});
  Runner r(m, 2, 8, 4);
  ASSERT_TRUE(r.kv);
  {
    ExecuteArgs e(r);
    ASSERT_OK(api()->execute(&e.a));
  }
  auto check = [&](auto edit, halo_status_code code, const char* substr) {
    ExecuteArgs e(r);
    edit(e);
    EXPECT_STATUS(api()->execute(&e.a), code, substr);
  };
  using E = ExecuteArgs;
  constexpr auto INV = HALO_STATUS_INVALID_ARGUMENT;
  constexpr auto OOR = HALO_STATUS_OUT_OF_RANGE;
  check([](E& e) { e.a.struct_size = 0; }, INV, "struct_size=0");
  check([](E& e) { e.a.executable = nullptr; }, INV, "executable is NULL");
  check([](E& e) { e.a.kv_cache = nullptr; }, INV, "kv_cache is NULL");
  check([](E& e) { e.a.num_seqs = 0; }, INV, "execute: num_seqs=0");
  check([](E& e) { e.a.num_tokens = 0; }, INV, "num_tokens=0");
  check([](E& e) { e.a.num_tokens = 4; }, INV, "query_start[1]=5 exceeds num_tokens=4");
  check([](E& e) { e.qs[1] = 4; }, INV, "does not equal num_tokens=5");
  check([](E& e) { e.qs[0] = 1; }, INV, "query_start[0]=1");
  check([](E& e) { e.a.token_ids = nullptr; }, INV, "token_ids is NULL");
  check([](E& e) { e.a.positions = nullptr; }, INV, "positions is NULL");
  check([](E& e) { e.a.slot_mapping = nullptr; }, INV, "slot_mapping is NULL");
  check([](E& e) { e.a.block_tables = nullptr; }, INV, "block_tables is NULL");
  check([](E& e) { e.a.context_lens = nullptr; }, INV, "context_lens is NULL");
  check([](E& e) { e.ctx[0] = 4; }, INV, "context_lens[0]=4 is smaller than its query length 5");
  check([](E& e) { e.ctx[0] = 9; }, OOR, "block_tables[0][1]=-1");
  check([](E& e) { e.ctx[0] = 17; }, INV, "needs 3 blocks but max_blocks_per_seq=2");
  check([](E& e) { e.bt[0] = 4; }, OOR, "block_tables[0][0]=4 is outside [0, 4)");
  check([](E& e) { e.slots[2] = 32; }, OOR, "slot_mapping[2]=32");
  check([](E& e) { e.slots[2] = -2; }, OOR, "slot_mapping[2]=-2");
  check([](E& e) { e.tokens[1] = 67; }, OOR, "token_ids[1]=67");
  check([](E& e) { e.positions[1] = -3; }, INV, "positions[1]=-3");
  check([](E& e) { e.li[0] = 5; }, OOR, "logits_indices[0]=5");
  check([](E& e) { e.a.logits = nullptr; }, INV, "logits is NULL");
  check([](E& e) { e.shape[1] = 66; }, INV, "logits has shape [1, 66], expected [1, 67]");
  check([](E& e) { e.lt.dtype = {kDLFloat, 16, 1}; }, INV, "logits has dtype float16");
  check([](E& e) { e.lt.device = {kDLCUDA, 0}; }, INV, "device_type=2");
  check([](E& e) { e.a.num_logits = -1; }, INV, "num_logits=-1");
  check([](E& e) { e.a.max_blocks_per_seq = 0; }, INV, "max_blocks_per_seq=0");
  check([](E& e) { e.a.num_tokens = 5000; }, INV, "exceeds max_num_batched_tokens");
  // A KV cache of another executable.
  Runner other(m, 1, 8, 4);
  check([&](E& e) { e.a.kv_cache = other.kv.get(); }, INV, "different executable");
  // Still works after all the failures.
  ExecuteArgs e(r);
  ASSERT_OK(api()->execute(&e.a));
}

// ---------------------------------------------------------------- buffers

template <class T>
void round_trip(DLDataType dt, std::vector<T> values) {
  Device dev = open_device(1);
  int64_t shape[2] = {2, static_cast<int64_t>(values.size() / 2)};
  std::vector<T> src(values.size() + 3);
  std::copy(values.begin(), values.end(), src.begin() + 3);
  DLTensor h{};
  h.data = src.data();
  h.byte_offset = 3 * sizeof(T);
  h.device = {kDLCPU, 0};
  h.ndim = 2;
  h.dtype = dt;
  h.shape = shape;
  halo_buffer_from_host_args f{};
  f.struct_size = sizeof f;
  f.device = dev.get();
  f.host = &h;
  ASSERT_OK(api()->buffer_from_host(&f));
  Buffer buf(f.buffer);
  std::fill(src.begin(), src.end(), T{});  // the buffer owns a copy
  std::vector<T> back(values.size());
  DLTensor o{};
  o.data = back.data();
  o.device = {kDLCPU, 0};
  o.ndim = 2;
  o.dtype = dt;
  o.shape = shape;
  halo_buffer_to_host_args t{};
  t.struct_size = sizeof t;
  t.buffer = buf.get();
  t.host = &o;
  ASSERT_OK(api()->buffer_to_host(&t));
  EXPECT_EQ(std::memcmp(back.data(), values.data(), values.size() * sizeof(T)), 0);
  // Mismatches.
  int64_t wrong[2] = {shape[1], shape[0]};
  o.shape = wrong;
  EXPECT_STATUS(api()->buffer_to_host(&t), HALO_STATUS_INVALID_ARGUMENT, "shape");
  o.shape = shape;
  o.dtype = dt.bits == 8 ? DLDataType{kDLInt, 8, 1} : DLDataType{kDLUInt, 8, 1};
  EXPECT_STATUS(api()->buffer_to_host(&t), HALO_STATUS_INVALID_ARGUMENT, "dtype");
}

TEST(CpuPluginBuffers, RoundTripEachDtype) {
  round_trip<float>({kDLFloat, 32, 1}, {1.5f, -2.f, 3.25f, 0.f, 1e-30f, 7.f});
  round_trip<uint16_t>({kDLBfloat, 16, 1}, {0x3f80, 0xbf80, 0x7f80, 0x0001, 0x1234, 0xffff});
  round_trip<uint16_t>({kDLFloat, 16, 1}, {0x3c00, 0xbc00, 0x7c00, 0x0001, 0x1234, 0x7bff});
  round_trip<int32_t>({kDLInt, 32, 1}, {1, -2, 3, INT32_MAX, INT32_MIN, 0});
  round_trip<int64_t>({kDLInt, 64, 1}, {1, -2, INT64_MAX, INT64_MIN, 5, 6});
  round_trip<uint8_t>({kDLUInt, 8, 1}, {0, 1, 2, 255, 128, 7});
}

TEST(CpuPluginBuffers, Errors) {
  Device dev = open_device(1);
  double d[4] = {};
  int64_t shape[1] = {4};
  DLTensor h{};
  h.data = d;
  h.device = {kDLCPU, 0};
  h.ndim = 1;
  h.dtype = {kDLFloat, 64, 1};
  h.shape = shape;
  halo_buffer_from_host_args f{};
  f.struct_size = sizeof f;
  f.device = dev.get();
  f.host = &h;
  EXPECT_STATUS(api()->buffer_from_host(&f), HALO_STATUS_INVALID_ARGUMENT, "bits=64");
  h.dtype = {kDLFloat, 32, 1};
  int64_t strides[1] = {2};
  h.strides = strides;
  EXPECT_STATUS(api()->buffer_from_host(&f), HALO_STATUS_INVALID_ARGUMENT, "not contiguous");
  h.strides = nullptr;
  f.host = nullptr;
  EXPECT_STATUS(api()->buffer_from_host(&f), HALO_STATUS_INVALID_ARGUMENT, "host is NULL");
  f.host = &h;
  f.device = nullptr;
  EXPECT_STATUS(api()->buffer_from_host(&f), HALO_STATUS_INVALID_ARGUMENT, "device is NULL");
}

// --------------------------------------------------------------- numerics

struct Variant {
  const char* name;
  Config cfg;
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

Config make(void (*edit)(Config&)) {
  Config c;
  edit(c);
  return c;
}

std::vector<Variant> variants() {
  return {
      {"mha_fp32", Config{}},
      {"gqa", make([](Config& c) {
         c.heads = 6;
         c.kv_heads = 2;
       })},
      {"mqa", make([](Config& c) {
         c.heads = 4;
         c.kv_heads = 1;
         c.head_dim = 16;
       })},
      {"qkv_bias", make([](Config& c) {
         c.heads = 6;
         c.kv_heads = 2;
         c.flags = HALO_MODEL_QKV_BIAS;
       })},
      {"qk_norm", make([](Config& c) {
         c.heads = 4;
         c.kv_heads = 2;
         c.head_dim = 16;
         c.flags = HALO_MODEL_QK_NORM;
       })},
      {"llama3_rope", make([](Config& c) {
         c.head_dim = 16;
         c.kv_heads = 2;
         c.theta = 10000;
         c.scaling = HALO_ROPE_SCALING_LLAMA3;
         c.factor = 8;
         c.low = 1;
         c.high = 4;
         c.orig_max = 64;
       })},
      {"linear_rope", make([](Config& c) {
         c.scaling = HALO_ROPE_SCALING_LINEAR;
         c.factor = 2.5f;
         c.theta = 500;
       })},
      {"tied", make([](Config& c) { c.flags = HALO_MODEL_TIED_EMBEDDINGS; })},
      {"gelu", make([](Config& c) { c.act = HALO_ACTIVATION_GELU_TANH; })},
      {"bf16", make([](Config& c) {
         c.wt = WeightType::BF16;
         c.heads = 6;
         c.kv_heads = 2;
       })},
      {"fp16", make([](Config& c) {
         c.wt = WeightType::F16;
         c.flags = HALO_MODEL_QKV_BIAS;
       })},
      {"mixed_all", make([](Config& c) {
         c.wt = WeightType::Mixed;
         c.heads = 8;
         c.kv_heads = 2;
         c.head_dim = 8;
         c.hidden = 48;
         c.inter = 100;
         c.layers = 3;
         c.flags = HALO_MODEL_QKV_BIAS | HALO_MODEL_QK_NORM | HALO_MODEL_TIED_EMBEDDINGS;
         c.scaling = HALO_ROPE_SCALING_LLAMA3;
         c.factor = 4;
         c.low = 1;
         c.high = 2;
         c.orig_max = 32;
       })},
  };
}

class Numerics : public ::testing::TestWithParam<Variant> {};

// Sets HALO_CPU_KERNELS for the plugin's next prepare, restoring it after.
class KernelPath {
 public:
  explicit KernelPath(const char* path) {
    const char* old = std::getenv("HALO_CPU_KERNELS");
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv("HALO_CPU_KERNELS", path, 1);
  }
  ~KernelPath() {
    had_ ? setenv("HALO_CPU_KERNELS", old_.c_str(), 1) : unsetenv("HALO_CPU_KERNELS");
  }

 private:
  bool had_ = false;
  std::string old_;
};

// Index of the largest value.
template <class T>
size_t argmax(const std::vector<T>& v) {
  return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST_P(Numerics, MatchesDenseReference) {
  const Config& cfg = GetParam().cfg;
  TestModel m(cfg);
  const int prompt = 21, decode = 4, bs = 4;
  const auto tokens = random_tokens(prompt + decode, cfg.vocab, cfg.seed + 11);
  std::vector<int> pos(tokens.size());
  std::iota(pos.begin(), pos.end(), 0);
  const auto ref = reference_forward(m, tokens, pos);

  // The reference kernels match the dense fp32 forward pass to 1e-4. The
  // fast kernels do too on fp32 weights (same precision, other summation
  // order); on 16-bit weights they round activations and the KV cache to
  // bf16, so they get bf16's tolerance and must pick the same greedy token
  // unless the reference's top two are closer than that tolerance.
  const bool wide = cfg.wt != WeightType::F32;
  for (const char* path : {"reference", "fast"}) {
    SCOPED_TRACE(path);
    const double tol = std::string(path) == "fast" && wide ? 2e-2 : 1e-4;
    KernelPath kp(path);
    Runner r(m, 2, bs, 16);
    ASSERT_TRUE(r.kv);
    Seq s;
    s.tokens = tokens;
    s.blocks = {3, 9, 0, 14, 7, 1, 12};  // non-contiguous blocks
    std::vector<std::vector<float>> out;
    auto check = [&](const std::vector<float>& got, const std::vector<double>& want,
                     const std::string& what) {
      EXPECT_LT(rel_err(got, want), tol) << what;
      const size_t g = argmax(got), w = argmax(want);
      if (g != w) {
        EXPECT_LT(std::fabs(want[w] - want[g]), tol * std::max(1.0, std::fabs(want[w]))) << what;
      }
    };
    ASSERT_EQ(run_step(r, {{&s, prompt, true}}, &out).code, HALO_STATUS_OK);
    ASSERT_EQ(out.size(), static_cast<size_t>(prompt));
    for (int t = 0; t < prompt; ++t) check(out[t], ref[t], "prefill token " + std::to_string(t));
    for (int d = 0; d < decode; ++d) {
      ASSERT_EQ(run_step(r, {{&s, 1}}, &out).code, HALO_STATUS_OK);
      check(out[0], ref[prompt + d], "decode step " + std::to_string(d));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, Numerics, ::testing::ValuesIn(variants()),
                         [](const auto& info) { return std::string(info.param.name); });

Config paging_cfg();  // below, with the paging tests

// Runs a 21-token prefill and 3 decode steps and returns every logits row,
// or nothing (with the prepare message in *why) when prepare refused.
std::vector<std::vector<float>> run_short(
    const TestModel& m, std::vector<halo_option> options, Runner** out_runner, std::string* why,
    const std::vector<halo_named_tensor>* weights = nullptr,
    const std::vector<halo_quantized_tensor>* quantized = nullptr) {
  static std::unique_ptr<Runner> keep;
  keep.reset();
  keep = std::make_unique<Runner>(m, 2, 16, 8, std::move(options), weights, quantized);
  if (out_runner) *out_runner = keep.get();
  if (!keep->kv) {
    *why = keep->prepare_status.message;
    return {};
  }
  Seq s;
  s.tokens = random_tokens(24, m.cfg.vocab, 77);
  s.blocks = {2, 0, 5};
  std::vector<std::vector<float>> all, out;
  EXPECT_EQ(run_step(*keep, {{&s, 21, true}}, &out).code, HALO_STATUS_OK);
  all = out;
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(run_step(*keep, {{&s, 1}}, &out).code, HALO_STATUS_OK);
    all.push_back(out.at(0));
  }
  return all;
}

TEST(Numerics, DtypeOptionSetsMatmulPrecision) {
  KernelPath fast("fast");
  Config c = paging_cfg();
  c.hidden = 64;
  c.inter = 160;
  TestModel f32(c);  // fp32 weights
  c.wt = WeightType::BF16;
  TestModel b16(c);
  std::vector<int> pos(24);
  std::iota(pos.begin(), pos.end(), 0);
  const auto tokens = random_tokens(24, c.vocab, 77);
  std::string why;
  Runner* r = nullptr;
  auto check = [&](const TestModel& m, const std::vector<std::vector<float>>& got, double tol) {
    const auto ref = reference_forward(m, tokens, pos);
    ASSERT_EQ(got.size(), 24u);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_LT(rel_err(got[i], ref[i]), tol) << "row " << i;
  };
  // fp32 weights, dtype bfloat16: converted to bf16 at load, bf16 KV by default.
  auto got = run_short(f32, {{"dtype", "bfloat16"}}, &r, &why);
  ASSERT_FALSE(got.empty()) << why;
  EXPECT_EQ(r->limits.kv_cache_dtype, HALO_KV_DTYPE_BF16);
  check(f32, got, 2e-2);
  const auto bf16_rows = got;
  // The same with dtype auto stays fp32 (and exact to 1e-4).
  got = run_short(f32, {{"dtype", "auto"}}, &r, &why);
  EXPECT_EQ(r->limits.kv_cache_dtype, HALO_KV_DTYPE_FP32);
  check(f32, got, 1e-4);
  EXPECT_NE(got, bf16_rows) << "dtype bfloat16 changed nothing";
  // bf16 weights, dtype float32: fp32 activations and KV, within 1e-4.
  got = run_short(b16, {{"dtype", "float32"}}, &r, &why);
  EXPECT_EQ(r->limits.kv_cache_dtype, HALO_KV_DTYPE_FP32);
  check(b16, got, 1e-4);
  // fp16 arithmetic does not exist here: refused by name.
  got = run_short(b16, {{"dtype", "float16"}}, &r, &why);
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(r->prepare_status.code, HALO_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(why.find("fp16"), std::string::npos) << why;
}

TEST(Numerics, OneDnnMatmulBackend) {
  KernelPath fast("fast");
  setenv("HALO_CPU_MATMUL", "onednn", 1);
  Config c = paging_cfg();
  c.wt = WeightType::BF16;
  TestModel m(c);
  std::string why;
  Runner* r = nullptr;
  auto got = run_short(m, {}, &r, &why);
  unsetenv("HALO_CPU_MATMUL");
  if (got.empty() && why.find("without oneDNN") != std::string::npos) GTEST_SKIP() << why;
  if (got.empty() && why.find("no bf16 matmul") != std::string::npos) GTEST_SKIP() << why;
  ASSERT_FALSE(got.empty()) << why;
  std::vector<int> pos(24);
  std::iota(pos.begin(), pos.end(), 0);
  const auto ref = reference_forward(m, random_tokens(24, c.vocab, 77), pos);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LT(rel_err(got[i], ref[i]), 2e-2) << "row " << i;
  // The same rows from the built-in GEMM: both round activations to bf16.
  auto halo_rows = run_short(m, {}, &r, &why);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_LT(rel_err(got[i], halo_rows[i]), 1e-3) << "row " << i;
}

// kernels and matmul are prepare options; the environment variables are only
// their defaults (the option wins). Bad values and unknown keys are refused by
// name (ABI v1.3).
TEST(Numerics, KernelAndMatmulOptions) {
  KernelPath fast("fast");  // the environment says fast; the option must win
  Config c = paging_cfg();
  TestModel m(c);
  std::string why;
  Runner* r = nullptr;
  const auto by_option = run_short(m, {{"kernels", "reference"}}, &r, &why);
  ASSERT_FALSE(by_option.empty()) << why;
  std::vector<std::vector<float>> by_env;
  {
    KernelPath reference("reference");
    by_env = run_short(m, {}, &r, &why);
  }
  EXPECT_EQ(by_option, by_env) << "kernels=reference did not select the reference kernels";
  auto refused = [&](std::vector<halo_option> opts, std::initializer_list<const char*> words) {
    EXPECT_TRUE(run_short(m, std::move(opts), &r, &why).empty());
    EXPECT_EQ(r->prepare_status.code, HALO_STATUS_INVALID_ARGUMENT) << why;
    for (const char* w : words) EXPECT_NE(why.find(w), std::string::npos) << "'" << w << "' not in: " << why;
  };
  refused({{"kernels", "fastest"}}, {"option kernels", "fastest", "fast, reference"});
  refused({{"matmul", "mkl"}}, {"option matmul", "mkl", "halo, onednn"});
  refused({{"kernel", "fast"}}, {"unknown option 'kernel'", "known: kernels, matmul, dtype, threads"});
}

TEST(Numerics, PositionsFeedRope) {
  // Positions that do not start at 0 (e.g. after a sliding prefix): the
  // plugin must use positions[], not the sequence index, for RoPE.
  Config cfg;
  cfg.scaling = HALO_ROPE_SCALING_LLAMA3;
  cfg.factor = 8;
  cfg.head_dim = 16;
  cfg.orig_max = 64;
  TestModel m(cfg);
  const auto tokens = random_tokens(9, cfg.vocab, 5);
  std::vector<int> pos(tokens.size());
  std::iota(pos.begin(), pos.end(), 300);
  const auto ref = reference_forward(m, tokens, pos);
  Runner r(m, 1, 16, 2);
  ASSERT_TRUE(r.kv);
  std::vector<int32_t> tk(tokens.begin(), tokens.end()), ps(pos.begin(), pos.end()), qs{0, 9},
      ctx{9}, bt{1}, li{0, 1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int64_t> slots{16, 17, 18, 19, 20, 21, 22, 23, 24};
  std::vector<float> out(9 * static_cast<size_t>(cfg.vocab));
  int64_t shape[2] = {9, cfg.vocab};
  DLTensor lt{out.data(), {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, nullptr, 0};
  halo_execute_args a{sizeof(halo_execute_args),
                      r.exec.get(),
                      r.kv.get(),
                      9,
                      tk.data(),
                      ps.data(),
                      slots.data(),
                      1,
                      qs.data(),
                      ctx.data(),
                      bt.data(),
                      1,
                      9,
                      li.data(),
                      &lt,
                      nullptr,
                      nullptr};
  ASSERT_OK(api()->execute(&a));
  for (int t = 0; t < 9; ++t) {
    std::vector<float> row(out.begin() + t * cfg.vocab, out.begin() + (t + 1) * cfg.vocab);
    EXPECT_LT(rel_err(row, ref[t]), 1e-4) << t;
  }
}

// ------------------------------------------------------- paging invariance

Config paging_cfg() {
  Config c;
  c.heads = 6;
  c.kv_heads = 2;
  c.flags = HALO_MODEL_QKV_BIAS;
  return c;
}

std::vector<std::vector<float>> prefill_then_decode(Runner& r, Seq& s, int prompt, int decode) {
  std::vector<std::vector<float>> all, out;
  EXPECT_EQ(run_step(r, {{&s, prompt}}, &out).code, HALO_STATUS_OK);
  all.push_back(out.at(0));
  for (int d = 0; d < decode; ++d) {
    EXPECT_EQ(run_step(r, {{&s, 1}}, &out).code, HALO_STATUS_OK);
    all.push_back(out.at(0));
  }
  return all;
}

TEST(Paging, ShuffledBlockIdsGiveSameLogits) {
  TestModel m(paging_cfg());
  const auto tokens = random_tokens(30, 67, 3);
  Runner r1(m, 2, 4, 32), r2(m, 2, 4, 32);
  Seq a, b;
  a.tokens = b.tokens = tokens;
  a.blocks = {0, 1, 2, 3, 4, 5, 6, 7};
  b.blocks = {31, 7, 19, 2, 25, 11, 0, 16};
  const auto la = prefill_then_decode(r1, a, 24, 6);
  const auto lb = prefill_then_decode(r2, b, 24, 6);
  for (size_t i = 0; i < la.size(); ++i) EXPECT_LT(rel_err(la[i], lb[i]), 1e-6) << i;
}

TEST(Paging, ChunkedPrefillEqualsWholePrefill) {
  TestModel m(paging_cfg());
  const auto tokens = random_tokens(27, 67, 4);
  Runner r1(m, 2, 4, 16), r2(m, 2, 4, 16);
  Seq a, b;
  a.tokens = b.tokens = tokens;
  a.blocks = b.blocks = {5, 2, 9, 12, 0, 3, 8};
  std::vector<std::vector<float>> whole, part;
  ASSERT_EQ(run_step(r1, {{&a, 25, true}}, &whole).code, HALO_STATUS_OK);
  std::vector<std::vector<float>> chunked;
  for (int n : {7, 10, 8}) {  // chunks not aligned to blocks
    ASSERT_EQ(run_step(r2, {{&b, n, true}}, &part).code, HALO_STATUS_OK);
    chunked.insert(chunked.end(), part.begin(), part.end());
  }
  ASSERT_EQ(chunked.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_LT(rel_err(chunked[i], whole[i]), 1e-5) << i;
  // And decoding continues identically.
  ASSERT_EQ(run_step(r1, {{&a, 2, true}}, &whole).code, HALO_STATUS_OK);
  ASSERT_EQ(run_step(r2, {{&b, 2, true}}, &part).code, HALO_STATUS_OK);
  for (size_t i = 0; i < 2; ++i) EXPECT_LT(rel_err(part[i], whole[i]), 1e-5);
}

TEST(Paging, MixedBatchEqualsSeparateRuns) {
  TestModel m(paging_cfg());
  Runner mixed(m, 2, 4, 40), solo(m, 2, 4, 40);
  // Two sequences decode while a third prefills in the same step.
  Seq d1, d2, p;
  d1.tokens = random_tokens(14, 67, 10);
  d2.tokens = random_tokens(9, 67, 11);
  p.tokens = random_tokens(13, 67, 12);
  d1.blocks = {0, 1, 2, 3};
  d2.blocks = {4, 5, 6};
  p.blocks = {7, 8, 9, 10};
  Seq s1 = d1, s2 = d2, s3 = p;
  std::vector<std::vector<float>> out, o1, o2, o3;
  ASSERT_EQ(run_step(mixed, {{&d1, 12}, {&d2, 7}}, &out).code, HALO_STATUS_OK);
  ASSERT_EQ(run_step(mixed, {{&d1, 1}, {&p, 13, true}, {&d2, 1}}, &out).code, HALO_STATUS_OK);
  ASSERT_EQ(out.size(), 15u);
  ASSERT_EQ(run_step(solo, {{&s1, 12}}, nullptr).code, HALO_STATUS_OK);
  ASSERT_EQ(run_step(solo, {{&s2, 7}}, nullptr).code, HALO_STATUS_OK);
  ASSERT_EQ(run_step(solo, {{&s1, 1}}, &o1).code, HALO_STATUS_OK);
  ASSERT_EQ(run_step(solo, {{&s3, 13, true}}, &o3).code, HALO_STATUS_OK);
  ASSERT_EQ(run_step(solo, {{&s2, 1}}, &o2).code, HALO_STATUS_OK);
  EXPECT_LT(rel_err(out[0], o1[0]), 1e-5);
  for (int i = 0; i < 13; ++i) EXPECT_LT(rel_err(out[1 + i], o3[i]), 1e-5) << i;
  EXPECT_LT(rel_err(out[14], o2[0]), 1e-5);
}

TEST(Paging, CopyBlocksThenDecodeEqualsRecompute) {
  TestModel m(paging_cfg());
  const auto tokens = random_tokens(20, 67, 21);
  Runner r(m, 2, 4, 24), ref(m, 2, 4, 24);
  // A 10-token prefix (blocks 0,1 full, block 2 half) shared copy-on-write:
  // the fork gets a copy of the partial last block and continues differently.
  Seq parent;
  parent.tokens = tokens;
  parent.blocks = {0, 1, 2, 3, 4};
  ASSERT_EQ(run_step(r, {{&parent, 10}}, nullptr).code, HALO_STATUS_OK);
  int32_t src[1] = {2}, dst[1] = {17};
  halo_kv_cache_copy_blocks_args c{};
  c.struct_size = sizeof c;
  c.kv_cache = r.kv.get();
  c.src_blocks = src;
  c.dst_blocks = dst;
  c.num_pairs = 1;
  ASSERT_OK(api()->kv_cache_copy_blocks(&c));
  Seq fork = parent;
  fork.tokens = random_tokens(20, 67, 99);
  std::copy(tokens.begin(), tokens.begin() + 10, fork.tokens.begin());
  fork.blocks = {0, 1, 17, 20, 21};
  std::vector<std::vector<float>> lp, lf, want_p, want_f;
  ASSERT_EQ(run_step(r, {{&parent, 3, true}, {&fork, 3, true}}, &lp).code, HALO_STATUS_OK);
  // Recompute both from scratch.
  Seq rp, rf;
  rp.tokens = parent.tokens;
  rp.blocks = {5, 6, 7, 8};
  rf.tokens = fork.tokens;
  rf.blocks = {9, 10, 11, 12};
  ASSERT_EQ(run_step(ref, {{&rp, 13, true}}, &want_p).code, HALO_STATUS_OK);
  ASSERT_EQ(run_step(ref, {{&rf, 13, true}}, &want_f).code, HALO_STATUS_OK);
  for (int i = 0; i < 3; ++i) {
    EXPECT_LT(rel_err(lp[i], want_p[10 + i]), 1e-5) << i;
    EXPECT_LT(rel_err(lp[3 + i], want_f[10 + i]), 1e-5) << i;
  }
  // Copy several pairs at once (whole blocks, all layers).
  int32_t s2[2] = {0, 1}, d2[2] = {22, 23};
  c.src_blocks = s2;
  c.dst_blocks = d2;
  c.num_pairs = 2;
  ASSERT_OK(api()->kv_cache_copy_blocks(&c));
  Seq again = fork;
  again.blocks = {22, 23, 17, 20, 21};
  std::vector<std::vector<float>> la, lf2;
  ASSERT_EQ(run_step(r, {{&again, 1}}, &la).code, HALO_STATUS_OK);
  ASSERT_EQ(run_step(ref, {{&rf, 1}}, &lf2).code, HALO_STATUS_OK);
  EXPECT_LT(rel_err(la[0], lf2[0]), 1e-5);
}

TEST(Paging, StaleReusedBlockDoesNotLeak) {
  TestModel m(paging_cfg());
  Runner r(m, 2, 4, 8), fresh(m, 2, 4, 8);
  // Fill blocks 0..3 with another sequence, then "free" them and reuse for a
  // shorter one whose last block is only partly written.
  Seq old;
  old.tokens = random_tokens(16, 67, 31);
  old.blocks = {3, 2, 1, 0};
  ASSERT_EQ(run_step(r, {{&old, 16}}, nullptr).code, HALO_STATUS_OK);
  Seq s, t;
  s.tokens = t.tokens = random_tokens(8, 67, 32);
  s.blocks = {1, 3};  // stale data everywhere, 2 tokens of block 3 never written
  t.blocks = {5, 6};
  std::vector<std::vector<float>> a, b;
  ASSERT_EQ(run_step(r, {{&s, 6, true}}, &a).code, HALO_STATUS_OK);
  ASSERT_EQ(run_step(fresh, {{&t, 6, true}}, &b).code, HALO_STATUS_OK);
  for (int i = 0; i < 6; ++i) EXPECT_LT(rel_err(a[i], b[i]), 1e-6) << i;
}

TEST(Paging, PaddingSlotsAreNotWritten) {
  // slot -1 tokens do not touch the cache: a padded decode step and an
  // unpadded one leave the same state behind.
  TestModel m(paging_cfg());
  Runner r(m, 1, 4, 8), q(m, 1, 4, 8);
  Seq a, b;
  a.tokens = b.tokens = random_tokens(12, 67, 41);
  a.blocks = b.blocks = {0, 1, 2};
  ASSERT_EQ(run_step(r, {{&a, 8}}, nullptr).code, HALO_STATUS_OK);
  ASSERT_EQ(run_step(q, {{&b, 8}}, nullptr).code, HALO_STATUS_OK);
  // Padding sequence in r: one token, slot -1, reading block 0 (of a).
  {
    std::vector<int32_t> tk{5}, ps{0}, qs{0, 1}, ctx{1}, bt{0}, li{};
    std::vector<int64_t> sl{-1};
    halo_execute_args x{sizeof(halo_execute_args),
                        r.exec.get(),
                        r.kv.get(),
                        1,
                        tk.data(),
                        ps.data(),
                        sl.data(),
                        1,
                        qs.data(),
                        ctx.data(),
                        bt.data(),
                        1,
                        0,
                        li.data(),
                        nullptr,
                        nullptr,
                        nullptr};
    ASSERT_OK(api()->execute(&x));
  }
  std::vector<std::vector<float>> la, lb;
  ASSERT_EQ(run_step(r, {{&a, 2, true}}, &la).code, HALO_STATUS_OK);
  ASSERT_EQ(run_step(q, {{&b, 2, true}}, &lb).code, HALO_STATUS_OK);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(la[i], lb[i]) << i;
}

// The fast path must give a sequence bitwise the same logits whatever else
// shares its step and however its prompt is chunked: greedy decoding must not
// depend on load. `weights`/`quantized`: prepare's, when not m's (ABI v1.4).
void expect_bitwise_batch_invariant(const TestModel& m,
                                    const std::vector<halo_named_tensor>* weights = nullptr,
                                    const std::vector<halo_quantized_tensor>* quantized = nullptr) {
  KernelPath fast("fast");
  const Config& c = m.cfg;
  const auto tokens = random_tokens(70, c.vocab, 21);
  Runner whole_r(m, 2, 16, 64, {}, weights, quantized),
      chunk_r(m, 2, 16, 64, {}, weights, quantized), mixed_r(m, 2, 16, 64, {}, weights, quantized),
      one_thread(m, 1, 16, 64, {}, weights, quantized);
  Seq a, b, x, y, z;
  a.tokens = b.tokens = x.tokens = z.tokens = tokens;
  a.blocks = z.blocks = {0, 1, 2, 3, 4};
  b.blocks = {9, 3, 14, 6, 1};
  x.blocks = {20, 21, 22, 23, 24};
  y.tokens = random_tokens(60, c.vocab, 22);
  y.blocks = {30, 31, 32, 33};
  std::vector<std::vector<float>> whole, chunked, part, mixed, single;
  ASSERT_EQ(run_step(whole_r, {{&a, 66, true}}, &whole).code, HALO_STATUS_OK);
  for (int n : {7, 17, 16, 26}) {  // chunks that cut blocks
    ASSERT_EQ(run_step(chunk_r, {{&b, n, true}}, &part).code, HALO_STATUS_OK);
    chunked.insert(chunked.end(), part.begin(), part.end());
  }
  ASSERT_EQ(chunked.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_EQ(chunked[i], whole[i]) << "prompt token " << i;
  ASSERT_EQ(run_step(one_thread, {{&z, 66, true}}, &single).code, HALO_STATUS_OK);
  EXPECT_EQ(single, whole) << "1 thread against 2";
  // In a mixed step: x prefills beside y's prefill, then decodes beside y.
  ASSERT_EQ(run_step(mixed_r, {{&y, 50}, {&x, 66, true}}, &mixed).code, HALO_STATUS_OK);
  ASSERT_EQ(mixed.size(), 67u);
  for (size_t i = 0; i < whole.size(); ++i)
    EXPECT_EQ(mixed[1 + i], whole[i]) << "mixed prompt token " << i;
  for (int d = 0; d < 4; ++d) {
    std::vector<std::vector<float>> alone, both;
    ASSERT_EQ(run_step(whole_r, {{&a, 1}}, &alone).code, HALO_STATUS_OK);
    ASSERT_EQ(run_step(mixed_r, {{&y, 1}, {&x, 1}}, &both).code, HALO_STATUS_OK);
    EXPECT_EQ(both.at(1), alone.at(0)) << "decode step " << d;
  }
}

TEST(Paging, Bf16FastPathIsBitwiseBatchInvariant) {
  // bf16 GEMM, bf16 KV, tiled attention.
  Config c = paging_cfg();
  c.wt = WeightType::BF16;
  c.hidden = 96;
  c.head_dim = 16;
  c.inter = 200;
  c.vocab = 301;
  c.layers = 3;
  TestModel m(c);
  expect_bitwise_batch_invariant(m);
}

// ------------------------------------------------- quantized weights (v1.4)

// A TestModel's projections quantized the way GGUF Q4_K_M mixes types: q, k,
// gate and lm_head uint4 group 32 with offsets (fp16), v int8 group 16
// (fp16), o and down int8 per channel (fp32), up_proj left plain, so that
// fused q|k|v and gate|up mix formats. `dequantized` is m's weights with the
// quantized ones replaced by their values (scale * q + offset) in fp32.
class QuantizedModel {
 public:
  explicit QuantizedModel(const TestModel& m) {
    store_.reserve(m.named.size());
    for (const halo_named_tensor& w : m.named) {
      const std::string name = w.name;
      auto f = format_for(name);
      if (!f) {
        plain.push_back(w);
        dequantized.push_back(w);
        continue;
      }
      const Tensor& t = m.tensor(name);
      Q& q = *store_.emplace_back(std::make_unique<Q>());
      quantize(q, *f, m.w(name), t.shape[0], t.shape[1]);
      quantized.push_back({w.name, f->type, static_cast<int32_t>(q.group), t.shape[0], t.shape[1],
                           &q.v, &q.s, f->type == HALO_QUANT_UINT4 ? &q.o : nullptr});
      dequantized.push_back({w.name, &q.d});
    }
  }
  std::vector<halo_named_tensor> plain, dequantized;
  std::vector<halo_quantized_tensor> quantized;

 private:
  struct Format {
    int32_t type;
    int group;  // 0: per channel
    bool f16_scales;
  };
  struct Q {
    int64_t group = 0;
    std::vector<int64_t> vshape, sshape, dshape;
    std::vector<uint8_t> values, scales, offsets;
    std::vector<float> deq;
    DLTensor v{}, s{}, o{}, d{};
  };
  static std::optional<Format> format_for(const std::string& n) {
    for (const char* u4 :
         {HALO_WEIGHT_Q_PROJ, HALO_WEIGHT_K_PROJ, HALO_WEIGHT_GATE_PROJ, HALO_WEIGHT_LM_HEAD})
      if (n.ends_with(u4)) return Format{HALO_QUANT_UINT4, 32, true};
    if (n.ends_with(HALO_WEIGHT_V_PROJ)) return Format{HALO_QUANT_INT8, 16, true};
    if (n.ends_with(HALO_WEIGHT_O_PROJ) || n.ends_with(HALO_WEIGHT_DOWN_PROJ))
      return Format{HALO_QUANT_INT8, 0, false};
    return std::nullopt;
  }
  static DLTensor dl(void* data, DLDataType t, std::vector<int64_t>& shape) {
    return DLTensor{data, {kDLCPU, 0}, static_cast<int32_t>(shape.size()), t, shape.data(), nullptr,
                    0};
  }
  // Stores a scale; returns the value stored.
  static float put(bool f16, float v, uint8_t* p) {
    if (!f16) return std::memcpy(p, &v, 4), v;
    const uint16_t h = halo::kernels::f32_to_f16(v);
    std::memcpy(p, &h, 2);
    return halo::kernels::f16_to_f32(h);
  }
  static void quantize(Q& q, const Format& f, const std::vector<float>& w, int64_t rows,
                       int64_t K) {
    const bool u4 = f.type == HALO_QUANT_UINT4;
    q.group = f.group ? f.group : K;
    const int64_t G = q.group, ng = K / G, es = f.f16_scales ? 2 : 4;
    const int qmin = u4 ? 0 : -127, qmax = u4 ? 15 : 127;
    q.values.assign(static_cast<size_t>(rows * (u4 ? K / 2 : K)), 0);
    q.scales.assign(static_cast<size_t>(rows * ng * es), 0);
    q.offsets.assign(q.scales.size(), 0);
    q.deq.resize(static_cast<size_t>(rows * K));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t g = 0; g < ng; ++g) {
        const float* x = w.data() + r * K + g * G;
        const auto [lo, hi] = std::minmax_element(x, x + G);
        const size_t at = static_cast<size_t>((r * ng + g) * es);
        const float sc =
            put(f.f16_scales, u4 ? (*hi - *lo) / 15.f : std::max(-*lo, *hi) / 127.f, &q.scales[at]);
        const float off = u4 ? put(f.f16_scales, *lo, &q.offsets[at]) : 0.f;
        for (int64_t k = 0; k < G; ++k) {
          const int v = std::clamp(
              static_cast<int>(sc > 0 ? std::nearbyint((x[k] - off) / sc) : 0.f), qmin, qmax);
          const int64_t e = r * K + g * G + k;
          if (u4)
            q.values[static_cast<size_t>(e / 2)] |= static_cast<uint8_t>(v << (e % 2 ? 4 : 0));
          else
            q.values[static_cast<size_t>(e)] = static_cast<uint8_t>(static_cast<int8_t>(v));
          q.deq[static_cast<size_t>(e)] = sc * static_cast<float>(v) + off;
        }
      }
    q.vshape = {rows, u4 ? K / 2 : K};
    q.sshape = {rows, ng};
    q.dshape = {rows, K};
    const DLDataType sdt{kDLFloat, static_cast<uint8_t>(es * 8), 1};
    q.v = dl(q.values.data(), u4 ? DLDataType{kDLUInt, 8, 1} : DLDataType{kDLInt, 8, 1}, q.vshape);
    q.s = dl(q.scales.data(), sdt, q.sshape);
    q.o = dl(q.offsets.data(), sdt, q.sshape);
    q.d = dl(q.deq.data(), DLDataType{kDLFloat, 32, 1}, q.dshape);
  }
  std::vector<std::unique_ptr<Q>> store_;
};

Config quant_cfg() {
  Config c = paging_cfg();  // q/k/v bias, 6 heads over 2 kv heads
  c.wt = WeightType::BF16;  // the parts left plain
  c.hidden = 64;
  c.head_dim = 16;
  c.inter = 96;
  c.vocab = 301;
  return c;
}

class QuantizedPaths : public ::testing::TestWithParam<int> {};

// Same quantized weights: the fast path (gemm_q, activations rounded to
// int8, bf16 KV) against the reference path (dequantized to fp32 at load),
// which in turn equals the reference path on the dequantized fp32 weights.
// Intermediate size 96 and 80: down_proj is int8 per channel, so its group
// is 96 (a multiple of 32) or 80 (a multiple of 16 only, where gemm_q's
// activation blocks must be 16 wide).
TEST_P(QuantizedPaths, FastPathMatchesReferencePath) {
  Config c = quant_cfg();
  c.inter = GetParam();
  const TestModel m(c);
  const QuantizedModel q(m);
  std::string why;
  Runner* r = nullptr;
  const auto ref = run_short(m, {{"kernels", "reference"}}, &r, &why, &q.plain, &q.quantized);
  ASSERT_FALSE(ref.empty()) << why;
  EXPECT_EQ(r->limits.compute_dtype, HALO_COMPUTE_DTYPE_FP32);
  EXPECT_EQ(r->limits.kv_cache_dtype, HALO_KV_DTYPE_FP32);
  const auto deq = run_short(m, {{"kernels", "reference"}}, &r, &why, &q.dequantized);
  ASSERT_EQ(deq.size(), ref.size()) << why;
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_LT(rel_err(ref[i], deq[i]), 1e-5) << "row " << i;
  const auto fast = run_short(m, {{"kernels", "fast"}}, &r, &why, &q.plain, &q.quantized);
  ASSERT_EQ(fast.size(), ref.size()) << why;
  EXPECT_EQ(r->limits.compute_dtype, HALO_COMPUTE_DTYPE_INT8);
  EXPECT_EQ(r->limits.kv_cache_dtype, HALO_KV_DTYPE_BF16);
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, rel_err(fast[i], ref[i]));
  std::printf("[quantized] fast (int8 activations, bf16 KV) against reference: max error %.3g\n",
              worst);
  EXPECT_LT(worst, 5e-2);
  // dtype float32 on the fast path: dequantized at load, fp32 throughout.
  const auto f32 =
      run_short(m, {{"kernels", "fast"}, {"dtype", "float32"}}, &r, &why, &q.plain, &q.quantized);
  ASSERT_EQ(f32.size(), ref.size()) << why;
  EXPECT_EQ(r->limits.compute_dtype, HALO_COMPUTE_DTYPE_FP32);
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_LT(rel_err(f32[i], ref[i]), 1e-4) << "row " << i;
}

INSTANTIATE_TEST_SUITE_P(Quantized, QuantizedPaths, ::testing::Values(96, 80),
                         [](const auto& info) { return "inter" + std::to_string(info.param); });

TEST(Quantized, FastPathIsBitwiseBatchInvariant) {
  Config c = quant_cfg();
  c.hidden = 96;
  c.inter = 192;
  c.layers = 3;
  const TestModel m(c);
  const QuantizedModel q(m);
  expect_bitwise_batch_invariant(m, &q.plain, &q.quantized);
}

TEST(Quantized, RefusalsNameTheWeight) {
  const TestModel m(quant_cfg());
  const QuantizedModel q(m);
  auto refused = [&](std::vector<halo_named_tensor> plain, std::vector<halo_quantized_tensor> qs,
                     std::initializer_list<const char*> words) {
    Runner r(m, 1, 16, 4, {{"kernels", "fast"}}, &plain, &qs);
    EXPECT_EQ(r.prepare_status.code, HALO_STATUS_INVALID_ARGUMENT) << r.prepare_status.message;
    for (const char* w : words)
      EXPECT_NE(r.prepare_status.message.find(w), std::string::npos)
          << "'" << w << "' not in: " << r.prepare_status.message;
  };
  const std::string q0 = std::string(HALO_WEIGHT_LAYER_PREFIX) + "0." + HALO_WEIGHT_Q_PROJ;
  auto qs = q.quantized;
  qs[0].group_size = 40;
  refused(q.plain, qs, {q0.c_str(), "group_size=40", "multiple of 16"});
  qs = q.quantized;
  qs[0].rows = 7;  // the header disagrees with its own values
  refused(q.plain, qs, {q0.c_str(), "values has shape [96, 32], expected [7, 32]"});
  qs = q.quantized;
  qs[1].name = qs[0].name;  // k_proj's tensor under q_proj's name
  qs.erase(qs.begin());
  auto no_k = q.plain;
  for (const auto& w : q.dequantized)
    if (std::string(w.name).ends_with("0." HALO_WEIGHT_K_PROJ)) no_k.push_back(w);
  refused(no_k, qs, {q0.c_str(), "rows=32 cols=64, expected the model's [96, 64]"});
  qs = q.quantized;
  qs[0].type = 9;
  refused(q.plain, qs, {q0.c_str(), "type 9", "int8, uint4"});
  auto plain = q.plain;
  for (const auto& w : q.dequantized)
    if (q0 == w.name) plain.push_back(w);  // layer 0's q_proj, also plain
  refused(plain, q.quantized, {q0.c_str(), "both plain"});
  qs = q.quantized;
  const DLTensor* wrong = qs[1].values;  // another tensor's values
  qs[0].values = wrong;
  refused(q.plain, qs, {q0.c_str(), "values has shape"});
  qs = q.quantized;
  qs.push_back(qs[0]);
  qs.back().name = "model.layers.0.self_attn.q_norm.weight";
  refused(q.plain, qs, {"q_norm", "not a projection"});
}

// ------------------------------------------------------------ determinism

TEST(Determinism, ThreadCountsGiveIdenticalLogits) {
  Config c = paging_cfg();
  c.wt = WeightType::BF16;
  c.hidden = 72;
  c.inter = 200;
  c.vocab = 301;
  TestModel m(c);
  std::vector<std::vector<std::vector<float>>> results;
  for (int threads : {1, 2, 3}) {
    Runner r(m, threads, 4, 32);
    ASSERT_TRUE(r.kv);
    Seq s1, s2;
    s1.tokens = random_tokens(40, c.vocab, 51);
    s2.tokens = random_tokens(40, c.vocab, 52);
    s1.blocks = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    s2.blocks = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
    std::vector<std::vector<float>> all, out;
    EXPECT_EQ(run_step(r, {{&s1, 33, true}, {&s2, 20, true}}, &out).code, HALO_STATUS_OK);
    all.insert(all.end(), out.begin(), out.end());
    for (int d = 0; d < 3; ++d) {
      EXPECT_EQ(run_step(r, {{&s1, 1}, {&s2, 1}}, &out).code, HALO_STATUS_OK);
      all.insert(all.end(), out.begin(), out.end());
    }
    results.push_back(all);
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t k = 1; k < results.size(); ++k)
    for (size_t i = 0; i < results[0].size(); ++i)
      EXPECT_EQ(results[0][i], results[k][i]) << "row " << i;
}

// ---------------------------------------------------------------- timing

TEST(Perf, DecodeStepTiming) {
  // pkgchat-5m's shape (hidden 256, 6 layers, 8/4 heads, vocab 4096) with
  // random bf16 weights. Prints the time of a decode step; no assertion.
  Config c;
  c.vocab = 4096;
  c.hidden = 256;
  c.inter = 704;
  c.layers = 6;
  c.heads = 8;
  c.kv_heads = 4;
  c.head_dim = 32;
  c.wt = WeightType::BF16;
  c.flags = HALO_MODEL_TIED_EMBEDDINGS;
  TestModel m(c);
  for (int threads : {1, 2}) {
    Runner r(m, threads, 16, 64);
    ASSERT_TRUE(r.kv);
    std::vector<Seq> seqs(8);
    for (int i = 0; i < 8; ++i) {
      seqs[i].tokens = random_tokens(200, c.vocab, 60 + i);
      for (int b = 0; b < 8; ++b) seqs[i].blocks.push_back(i * 8 + b);
    }
    std::vector<StepSeq> prefill;
    for (auto& s : seqs) prefill.push_back({&s, 64});
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(run_step(r, prefill, nullptr).code, HALO_STATUS_OK);
    const auto t1 = std::chrono::steady_clock::now();
    const int steps = 32;
    for (int i = 0; i < steps; ++i)
      ASSERT_EQ(run_step(r, {{&seqs[0], 1}}, nullptr).code, HALO_STATUS_OK);
    const auto t2 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) {
      std::vector<StepSeq> batch;
      for (int j = 1; j < 8; ++j) batch.push_back({&seqs[j], 1});
      ASSERT_EQ(run_step(r, batch, nullptr).code, HALO_STATUS_OK);
    }
    const auto t3 = std::chrono::steady_clock::now();
    using ms = std::chrono::duration<double, std::milli>;
    std::printf(
        "[perf] threads=%d prefill 8x64 tokens: %.2f ms; decode batch 1: %.3f ms/step; batch 7: "
        "%.3f ms/step\n",
        threads, ms(t1 - t0).count(), ms(t2 - t1).count() / steps, ms(t3 - t2).count() / steps);
  }
}

}  // namespace
