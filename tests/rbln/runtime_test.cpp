// The rbln plugin's speculative decoding path through its C ABI (dlopen of the
// built plugin, a tiny random model compiled by its own compile entry): prepare
// answers the compiled num_speculative_tokens whatever is proposed; a decode
// step whose sequences carry 1..K+1 tokens runs on a verify program and gives,
// for the rows asked for and in the caller's order, the logits of decoding
// the same tokens one step at a time; steps the programs cannot run are
// refused naming the numbers and halo compile --num-speculative-tokens.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "halo/device_abi.h"

namespace {
namespace fs = std::filesystem;

constexpr int32_t kVocab = 96, kHidden = 32, kInter = 48, kHeads = 2, kKvHeads = 1, kHeadDim = 16;
constexpr int32_t kMaxLen = 32, kBatch = 4;

struct Status {
  halo_status_code code = HALO_STATUS_OK;
  std::string message;
  bool ok() const { return code == HALO_STATUS_OK; }
};

const halo_plugin_api* api() {
  static const halo_plugin_api* a = [] {
    void* h = dlopen(HALO_RBLN_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    if (!h) return static_cast<const halo_plugin_api*>(nullptr);
    auto get = reinterpret_cast<const halo_plugin_api* (*)()>(dlsym(h, "halo_plugin_get_api"));
    return get ? get() : nullptr;
  }();
  return a;
}

Status status(halo_error* e) {
  Status s{api()->error_code(e), api()->error_message(e)};
  api()->error_destroy(e);
  return s;
}

halo_model_spec tiny_spec() {
  halo_model_spec s{};
  s.struct_size = sizeof(s);
  s.architecture = "LlamaForCausalLM";
  s.vocab_size = kVocab;
  s.hidden_size = kHidden;
  s.intermediate_size = kInter;
  s.num_layers = 1;
  s.num_heads = kHeads;
  s.num_kv_heads = kKvHeads;
  s.head_dim = kHeadDim;
  s.max_position_embeddings = 64;
  s.rms_norm_eps = 1e-5f;
  s.rope_theta = 10000.f;
  s.flags = HALO_MODEL_TIED_EMBEDDINGS;
  return s;
}

// Random fp32 weights of the tiny model, owned with their DLTensors.
struct Weights {
  std::vector<std::vector<float>> data;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::string> names;
  std::vector<DLTensor> tensors;
  std::vector<halo_named_tensor> named;

  Weights() {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.f, 0.2f);
    const std::string l = std::string(HALO_WEIGHT_LAYER_PREFIX) + "0.";
    add(HALO_WEIGHT_EMBED_TOKENS, {kVocab, kHidden}, rng, nd);
    add(HALO_WEIGHT_FINAL_NORM, {kHidden}, rng, nd, 1.f);
    add(l + HALO_WEIGHT_ATTN_NORM, {kHidden}, rng, nd, 1.f);
    add(l + HALO_WEIGHT_Q_PROJ, {kHeads * kHeadDim, kHidden}, rng, nd);
    add(l + HALO_WEIGHT_K_PROJ, {kKvHeads * kHeadDim, kHidden}, rng, nd);
    add(l + HALO_WEIGHT_V_PROJ, {kKvHeads * kHeadDim, kHidden}, rng, nd);
    add(l + HALO_WEIGHT_O_PROJ, {kHidden, kHeads * kHeadDim}, rng, nd);
    add(l + HALO_WEIGHT_MLP_NORM, {kHidden}, rng, nd, 1.f);
    add(l + HALO_WEIGHT_GATE_PROJ, {kInter, kHidden}, rng, nd);
    add(l + HALO_WEIGHT_UP_PROJ, {kInter, kHidden}, rng, nd);
    add(l + HALO_WEIGHT_DOWN_PROJ, {kHidden, kInter}, rng, nd);
    tensors.resize(data.size());
    for (size_t i = 0; i < data.size(); ++i) {
      DLTensor& t = tensors[i];
      t.data = data[i].data();
      t.device = {kDLCPU, 0};
      t.ndim = static_cast<int>(shapes[i].size());
      t.dtype = {kDLFloat, 32, 1};
      t.shape = shapes[i].data();
      named.push_back({names[i].c_str(), &t});
    }
  }
  void add(const std::string& name, std::vector<int64_t> shape, std::mt19937& rng,
           std::normal_distribution<float>& nd, float offset = 0.f) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    std::vector<float> v(n);
    for (float& x : v) x = offset + nd(rng);
    data.push_back(std::move(v));
    shapes.push_back(std::move(shape));
    names.push_back(name);
  }
};

// A model compiled with --num-speculative-tokens k, prepared with `proposed`
// and given a KV cache of `blocks` sequences.
struct Session {
  halo_device* dev = nullptr;
  halo_executable* exe = nullptr;
  halo_kv_cache* kv = nullptr;
  halo_limits limits{};
  ~Session() {
    if (api()) {
      api()->kv_cache_destroy(kv);
      api()->executable_destroy(exe);
      api()->device_destroy(dev);
    }
  }
};

std::unique_ptr<Session> open_session(int k, int proposed, Status* st) {
  static const Weights w;
  const halo_model_spec spec = tiny_spec();
  const fs::path dir =
      fs::temp_directory_path() /
      ("halo-rbln-runtime-test-" + std::to_string(::getpid()) + "-k" + std::to_string(k));
  const std::string out = dir.string(), ks = std::to_string(k), bs = std::to_string(kBatch),
                    ls = std::to_string(kMaxLen);
  const halo_option opts[] = {{"batch_size", bs.c_str()},
                              {"max_seq_len", ls.c_str()},
                              {"num_speculative_tokens", ks.c_str()}};
  halo_compile_args ca{};
  ca.struct_size = sizeof(ca);
  ca.spec = &spec;
  ca.weights = w.named.data();
  ca.num_weights = w.named.size();
  ca.options = opts;
  ca.num_options = 3;
  ca.out_dir = out.c_str();
  if (*st = status(api()->compile(&ca)); !st->ok()) return nullptr;
  auto s = std::make_unique<Session>();
  halo_device_open_args oa{};
  oa.struct_size = sizeof(oa);
  if (*st = status(api()->device_open(&oa)); !st->ok()) return nullptr;
  s->dev = oa.device;
  halo_model_spec cs = spec;
  cs.compiled_model_dir = out.c_str();
  cs.compiled_target = "rbln";
  s->limits.struct_size = sizeof(s->limits);
  s->limits.num_speculative_tokens = proposed;
  halo_prepare_args pa{};
  pa.struct_size = sizeof(pa);
  pa.device = s->dev;
  pa.spec = &cs;
  pa.limits = &s->limits;
  if (*st = status(api()->prepare(&pa)); !st->ok()) return nullptr;
  s->exe = pa.executable;
  halo_kv_cache_create_args ka{};
  ka.struct_size = sizeof(ka);
  ka.executable = s->exe;
  ka.num_blocks = 2 * kBatch;
  ka.block_size = s->limits.block_size;
  if (*st = status(api()->kv_cache_create(&ka)); !st->ok()) return nullptr;
  s->kv = ka.kv_cache;
  fs::remove_all(dir);
  return s;
}

// One sequence: its tokens, how many are cached, and its block.
struct Seq {
  std::vector<int32_t> tokens;
  int32_t cached = 0, block = 0;
};

// One step: sequence i feeds its next q[i] tokens; logits for the flat rows
// `rows` (all rows when empty), returned in that order.
Status step(Session& s, std::vector<Seq*> seqs, const std::vector<int32_t>& q,
            std::vector<int32_t> rows, std::vector<std::vector<float>>* logits) {
  std::vector<int32_t> tok, pos, qs{0}, ctx, blocks;
  std::vector<int64_t> slots;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq& sq = *seqs[i];
    for (int32_t j = 0; j < q[i]; ++j) {
      const int32_t p = sq.cached + j;
      tok.push_back(sq.tokens.at(static_cast<size_t>(p)));
      pos.push_back(p);
      slots.push_back(int64_t{sq.block} * kMaxLen + p);
    }
    qs.push_back(qs.back() + q[i]);
    ctx.push_back(sq.cached + q[i]);
    blocks.push_back(sq.block);
  }
  if (rows.empty())
    for (int32_t t = 0; t < qs.back(); ++t) rows.push_back(t);
  std::vector<float> out(rows.size() * kVocab);
  int64_t shape[2] = {static_cast<int64_t>(rows.size()), kVocab};
  DLTensor lt{};
  lt.data = out.data();
  lt.device = {kDLCPU, 0};
  lt.ndim = 2;
  lt.dtype = {kDLFloat, 32, 1};
  lt.shape = shape;
  halo_execute_args a{};
  a.struct_size = sizeof(a);
  a.executable = s.exe;
  a.kv_cache = s.kv;
  a.num_tokens = qs.back();
  a.token_ids = tok.data();
  a.positions = pos.data();
  a.slot_mapping = slots.data();
  a.num_seqs = static_cast<int32_t>(seqs.size());
  a.query_start = qs.data();
  a.context_lens = ctx.data();
  a.block_tables = blocks.data();
  a.max_blocks_per_seq = 1;
  a.num_logits = static_cast<int32_t>(rows.size());
  a.logits_indices = rows.data();
  a.logits = &lt;
  Status st = status(api()->execute(&a));
  if (!st.ok()) return st;
  for (size_t i = 0; i < seqs.size(); ++i) seqs[i]->cached += q[i];
  if (logits)
    for (size_t r = 0; r < rows.size(); ++r)
      logits->emplace_back(out.begin() + static_cast<std::ptrdiff_t>(r * kVocab),
                           out.begin() + static_cast<std::ptrdiff_t>((r + 1) * kVocab));
  return st;
}

std::vector<int32_t> tokens(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(n);
  for (auto& t : v) t = static_cast<int32_t>(rng() % kVocab);
  return v;
}

class RblnRuntime : public ::testing::Test {
 protected:
  void SetUp() override {
    if (api() == nullptr) GTEST_SKIP() << "cannot load " HALO_RBLN_PLUGIN_PATH ": " << dlerror();
  }
};

TEST_F(RblnRuntime, PrepareAnswersTheCompiledVerifyLimit) {
  for (const auto& [k, proposed] :
       std::initializer_list<std::pair<int, int>>{{2, 0}, {2, 2}, {2, 5}, {0, 3}}) {
    Status st;
    auto s = open_session(k, proposed, &st);
    ASSERT_TRUE(s) << st.message;
    EXPECT_EQ(s->limits.num_speculative_tokens, k) << "compiled " << k << ", proposed " << proposed;
  }
}

// Three prefilled sequences verify 2, 0 and 1 proposed tokens in one decode
// step (the 4-sequence verify program, padded), logits asked for in reverse
// order; the same tokens decoded one step at a time give the same rows.
TEST_F(RblnRuntime, VerifyStepEqualsDecodingOneTokenAtATime) {
  Status st;
  auto s = open_session(2, 2, &st);
  ASSERT_TRUE(s) << st.message;
  const std::vector<int32_t> prompt_len{5, 9, 2}, q{3, 1, 2};
  std::vector<Seq> verify(3), decode(3);
  for (int32_t i = 0; i < 3; ++i) {
    verify[size_t(i)].tokens = decode[size_t(i)].tokens =
        tokens(size_t(prompt_len[size_t(i)] + q[size_t(i)]), 100 + i);
    verify[size_t(i)].block = i;
    decode[size_t(i)].block = kBatch + i;
    for (Seq* sq : {&verify[size_t(i)], &decode[size_t(i)]})
      ASSERT_TRUE(
          step(*s, {sq}, {prompt_len[size_t(i)]}, {prompt_len[size_t(i)] - 1}, nullptr).ok());
  }
  std::vector<int32_t> reversed;
  for (int32_t t = 5; t >= 0; --t) reversed.push_back(t);
  std::vector<std::vector<float>> got;
  st = step(*s, {&verify[0], &verify[1], &verify[2]}, q, reversed, &got);
  ASSERT_TRUE(st.ok()) << st.message;
  std::vector<std::vector<float>> want;  // flat row order: sequence 0's 3 rows, 1's, 2's
  for (int32_t j = 0; j < 3; ++j) {
    std::vector<Seq*> who;
    for (size_t i = 0; i < 3; ++i)
      if (j < q[i]) who.push_back(&decode[i]);
    std::vector<std::vector<float>> rows;
    ASSERT_TRUE(step(*s, who, std::vector<int32_t>(who.size(), 1), {}, &rows).ok());
    for (size_t r = 0; r < who.size(); ++r) {
      const size_t i = static_cast<size_t>(who[r] - decode.data());
      const size_t flat = (i == 0 ? 0 : i == 1 ? 3 : 4) + static_cast<size_t>(j);
      if (want.size() <= flat) want.resize(flat + 1);
      want[flat] = rows[r];
    }
  }
  ASSERT_EQ(got.size(), 6u);
  double apart = 0;  // rows of different tokens differ: the comparison below means something
  for (size_t v = 0; v < got[0].size(); ++v)
    apart = std::max(apart, double(std::fabs(got[0][v] - got[5][v])));
  EXPECT_GT(apart, 1e-2);
  for (size_t r = 0; r < 6; ++r) {
    const auto& w = want[5 - r];
    double worst = 0;
    for (size_t v = 0; v < w.size(); ++v)
      worst = std::max(worst, double(std::fabs(got[r][v] - w[v])));
    EXPECT_LT(worst, 1e-4) << "logits row " << r << " (flat row " << 5 - r << ")";
  }
}

TEST_F(RblnRuntime, StepsTheProgramsCannotRunAreRefused) {
  Status st;
  auto k2 = open_session(2, 2, &st);
  ASSERT_TRUE(k2) << st.message;
  std::vector<Seq> seqs(2);
  for (int32_t i = 0; i < 2; ++i) {
    seqs[size_t(i)].tokens = tokens(12, 200 + i);
    seqs[size_t(i)].block = i;
    ASSERT_TRUE(step(*k2, {&seqs[size_t(i)]}, {4}, {3}, nullptr).ok());
  }
  // 4 tokens = 3 proposals, one more than compiled, beside a plain decode.
  st = step(*k2, {&seqs[0], &seqs[1]}, {1, 4}, {}, nullptr);
  EXPECT_EQ(st.code, HALO_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(st.message.find("sequence 1 has 4 query tokens"), std::string::npos) << st.message;
  EXPECT_NE(st.message.find("--num-speculative-tokens 2"), std::string::npos) << st.message;
  // One sequence alone with more tokens than a verify takes runs as a prefill (in chunks).
  EXPECT_TRUE(step(*k2, {&seqs[1]}, {5}, {}, nullptr).ok());

  auto k0 = open_session(0, 0, &st);
  ASSERT_TRUE(k0) << st.message;
  for (int32_t i = 0; i < 2; ++i) {
    seqs[size_t(i)].cached = 0;
    ASSERT_TRUE(step(*k0, {&seqs[size_t(i)]}, {4}, {3}, nullptr).ok());
  }
  st = step(*k0, {&seqs[0], &seqs[1]}, {2, 1}, {}, nullptr);
  EXPECT_EQ(st.code, HALO_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(st.message.find("compiled without verify programs"), std::string::npos) << st.message;
  EXPECT_NE(st.message.find("--num-speculative-tokens 1"), std::string::npos) << st.message;
}

}  // namespace
