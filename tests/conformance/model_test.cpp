// Golden models against the CPU reference, paging invariance, limits and
// padding, tensor parallelism.
#include <algorithm>
#include <cstring>
#include <iostream>

#include "suite.h"

namespace conf {
namespace {

// Proposal for paging tests: small blocks so that sequences span several.
Proposal small_blocks() {
  Proposal p;
  p.block_size = 4;
  return p;
}

std::optional<Session> session_for(const Lib& lib, const Model& m, const Proposal& p, Status* st, int num_blocks = 0) {
  SessionOptions o;
  o.proposal = p;
  o.num_blocks = num_blocks;
  return make_session(lib, &lib == &plugin() ? settings().device : 0, m, o, st);
}

}  // namespace

// Reference session agreeing with `under_test`'s limits (block size of its own choice).
std::optional<Session> reference_like(const Session& under_test, const Model& m, Status* st) {
  Proposal p;
  p.max_num_seqs = under_test.limits.max_num_seqs;
  p.max_model_len = under_test.limits.max_model_len;
  p.max_num_batched_tokens = std::max(under_test.limits.max_num_batched_tokens, under_test.limits.max_model_len);
  p.block_size = 16;
  SessionOptions o;
  o.proposal = p;
  o.device_options = {{"threads", "1"}};
  return make_session(*reference(), 0, m, o, st);
}

namespace {

// =================================================================== golden

struct GoldenCase {
  std::string family;
  WeightDtype dtype;
};

class Golden : public Conformance, public testing::WithParamInterface<GoldenCase> {};

TEST_P(Golden, MatchesReference) {
  const GoldenCase gc = GetParam();
  if (reference() == nullptr) GTEST_SKIP() << "no CPU reference plugin: " << settings().reference_why;
  if (gc.dtype != WeightDtype::F32 && !claims(dtype_cap(gc.dtype)))
    GTEST_SKIP() << "the device does not claim " << dtype_name(gc.dtype) << " weights";
  ModelConfig c = family(gc.family);
  c.dtype = gc.dtype;
  if (gc.dtype == WeightDtype::F32 && !claims(HALO_CAP_DTYPE_FP32)) c.dtype = preferred_dtype();
  if (const std::string no = tp_cannot_split(c); !no.empty()) GTEST_SKIP() << no;
  const Model m(c);
  Status st;
  auto s = session_for(plugin(), m, {}, &st);
  ASSERT_TRUE(s) << gc.family << ": " << describe(st) << " " CONTRACT_LOGITS;
  auto r = reference_like(*s, m, &st);
  ASSERT_TRUE(r) << "reference: " << describe(st);
  Workload w;
  w.prompts = make_prompts(*s, {5, 17, 1, 33, 9, 24}, 6, 100);
  w.outputs = 6;
  const WorkloadResult want = run_workload(*r, w);
  ASSERT_TRUE(want.status.ok()) << "reference: " << describe(want.status);
  w.forced = &want.argmax;  // teacher forcing: both see the same tokens
  const WorkloadResult got = run_workload(*s, w);
  ASSERT_TRUE(got.status.ok()) << gc.family << ": execute failed: " << describe(got.status) << " " CONTRACT_LOGITS;
  const Tolerance tol = tolerance_for(*s);
  std::cout << "[ golden ] " << gc.family << "/" << dtype_name(c.dtype) << ": max error " << max_error(got, want)
            << ", tolerance " << tol.value << " (" << tol.why << ")\n";
  const std::string e = compare_results(got, want, tol.value, true);
  EXPECT_EQ(e, "") << gc.family << "/" << dtype_name(gc.dtype) << ", tolerance " << tol.value << " (" << tol.why
                   << "): " << (e.find("greedy") != std::string::npos ? "" : CONTRACT_LOGITS);
}

std::vector<GoldenCase> golden_cases() {
  std::vector<GoldenCase> out;
  for (const auto& f : model_families()) out.push_back({f.family, WeightDtype::F32});
  for (WeightDtype d : {WeightDtype::BF16, WeightDtype::F16, WeightDtype::Mixed}) out.push_back({"qwen2", d});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Families, Golden, testing::ValuesIn(golden_cases()), [](const auto& info) {
  return info.param.family + "_" + dtype_name(info.param.dtype);
});

// =================================================================== paging

class Paging : public Conformance {
 protected:
  void SetUp() override {
    Conformance::SetUp();
    if (HasFatalFailure()) return;
    Status st;
    s_ = session_for(plugin(), model_, small_blocks(), &st);
    ASSERT_TRUE(s_) << describe(st) << " " CONTRACT_LIMITS;
  }
  static ModelConfig config() {
    ModelConfig c = family("llama");
    c.dtype = preferred_dtype();
    return c;
  }
  const Model model_{config()};
  std::optional<Session> s_;
};

TEST_F(Paging, ShuffledBlockIds) {
  Workload w;
  w.prompts = make_prompts(*s_, {11, 6, 19, 3}, 5, 200);
  w.outputs = 5;
  const WorkloadResult base = run_workload(*s_, w);
  ASSERT_TRUE(base.status.ok()) << describe(base.status);
  for (uint32_t seed : {12345u, 777u}) {
    w.shuffle_seed = seed;
    w.forced = &base.argmax;
    const WorkloadResult shuffled = run_workload(*s_, w);
    ASSERT_TRUE(shuffled.status.ok()) << describe(shuffled.status);
    EXPECT_EQ(compare_results(shuffled, base, 1e-4, true), "")
        << "block ids shuffled (seed " << seed << ") change the logits " CONTRACT_BLOCK_TABLES;
  }
}

TEST_F(Paging, ChunkedEqualsWholePrefill) {
  if (!(s_->limits.capabilities & HALO_CAP_CHUNKED_PREFILL))
    GTEST_SKIP() << "prepare did not agree to HALO_CAP_CHUNKED_PREFILL";
  Workload w;
  w.prompts = make_prompts(*s_, {13, 22, 7}, 4, 300);
  w.outputs = 4;
  const WorkloadResult whole = run_workload(*s_, w);
  ASSERT_TRUE(whole.status.ok()) << describe(whole.status);
  w.forced = &whole.argmax;
  for (int chunk : {1, 3, 5}) {
    w.chunk = chunk;
    const WorkloadResult chunked = run_workload(*s_, w);
    ASSERT_TRUE(chunked.status.ok()) << "chunk " << chunk << ": " << describe(chunked.status) << " " CONTRACT_CHUNKED;
    EXPECT_EQ(compare_results(chunked, whole, 1e-4, true), "") << "prefill in chunks of " << chunk << " " CONTRACT_CHUNKED;
  }
}

TEST_F(Paging, MixedBatchEqualsSeparateSteps) {
  if (!(s_->limits.capabilities & HALO_CAP_MIXED_BATCH))
    GTEST_SKIP() << "prepare did not agree to HALO_CAP_MIXED_BATCH";
  Workload w;
  w.prompts = make_prompts(*s_, {4, 15, 8, 2, 10}, 5, 400);
  w.outputs = 5;
  w.mixed = false;
  const WorkloadResult separate = run_workload(*s_, w);
  ASSERT_TRUE(separate.status.ok()) << describe(separate.status);
  w.mixed = true;
  w.forced = &separate.argmax;
  const WorkloadResult mixed = run_workload(*s_, w);
  ASSERT_TRUE(mixed.status.ok()) << describe(mixed.status) << " " CONTRACT_MIXED;
  EXPECT_EQ(compare_results(mixed, separate, 1e-4, true), "") << CONTRACT_MIXED;
}

TEST_F(Paging, BlockTablePaddingIgnored) {
  // Columns beyond a sequence's blocks are -1 and must never be read.
  const int bs = s_->limits.block_size;
  const int n = std::min(10, s_->limits.max_model_len - 1);
  std::vector<std::vector<float>> tight, padded;
  BlockPool pool(s_->num_blocks, 0);
  Seq a, b;
  a.tokens = b.tokens = random_tokens(n, s_->vocab, 9);
  ASSERT_TRUE(pool.reserve(a, n, bs) && pool.reserve(b, n, bs));
  Status st = run_step(*s_, {{&a, n}}, &tight, {0, {}});
  ASSERT_TRUE(st.ok()) << describe(st);
  st = run_step(*s_, {{&b, n}}, &padded, {7, {}});
  ASSERT_TRUE(st.ok()) << "max_blocks_per_seq larger than needed, -1 padded: " << describe(st) << " " CONTRACT_BLOCK_TABLES;
  EXPECT_EQ(compare_rows(padded[0], tight[0], 1e-4), "") << CONTRACT_BLOCK_TABLES;
}

TEST_F(Paging, CopyBlocksEqualsRecompute) {
  const int bs = s_->limits.block_size;
  // A prompt ending inside a block, so the copied last block is partly filled.
  int p = std::min(3 * bs + bs / 2 + 1, s_->limits.max_model_len - 2);
  if (!(s_->limits.capabilities & HALO_CAP_CHUNKED_PREFILL)) p = std::min(p, s_->limits.max_num_batched_tokens - 1);
  ASSERT_GT(p, 0);
  const auto prompt = random_tokens(p, s_->vocab, 21);
  const int32_t next = 5;
  BlockPool pool(s_->num_blocks, 99);
  Seq a;
  a.tokens = prompt;
  ASSERT_TRUE(pool.reserve(a, p, bs));
  Status st = run_step(*s_, {{&a, p, false}}, nullptr);
  ASSERT_TRUE(st.ok()) << describe(st);
  // Copy a's blocks to fresh ones (dst holds what src held, every layer).
  Seq c;
  c.tokens = prompt;
  c.cached = p;
  std::vector<int32_t> src = a.blocks, dst;
  for (size_t i = 0; i < src.size(); ++i) dst.push_back(pool.take());
  ASSERT_TRUE(std::find(dst.begin(), dst.end(), -1) == dst.end()) << "KV cache too small";
  c.blocks = dst;
  halo_kv_cache_copy_blocks_args ca{};
  ca.struct_size = sizeof ca;
  ca.kv_cache = s_->kv.get();
  ca.src_blocks = src.data();
  ca.dst_blocks = dst.data();
  ca.num_pairs = static_cast<int32_t>(src.size());
  st = take(api(), api()->kv_cache_copy_blocks(&ca));
  ASSERT_TRUE(st.ok()) << "kv_cache_copy_blocks: " << describe(st) << " " CONTRACT_COPY;
  // Overwrite the source blocks with another sequence, so a copy that only aliases shows.
  Seq other;
  other.tokens = random_tokens(p, s_->vocab, 22);
  other.blocks = a.blocks;
  st = run_step(*s_, {{&other, p, false}}, nullptr);
  ASSERT_TRUE(st.ok()) << describe(st);
  // Decode one token on the copy ...
  c.tokens.push_back(next);
  c.blocks.resize(static_cast<size_t>((p + 1 + bs - 1) / bs), -1);
  if (c.blocks.back() < 0) c.blocks.back() = pool.take();
  std::vector<std::vector<float>> from_copy, recomputed;
  st = run_step(*s_, {{&c, 1}}, &from_copy);
  ASSERT_TRUE(st.ok()) << describe(st);
  // ... and recompute the same context from scratch in a fresh cache.
  Status st2 = new_kv_cache(*s_, s_->num_blocks);
  ASSERT_TRUE(st2.ok()) << describe(st2);
  BlockPool fresh(s_->num_blocks, 0);
  Seq r;
  r.tokens = c.tokens;
  ASSERT_TRUE(fresh.reserve(r, p + 1, bs));
  if (s_->limits.capabilities & HALO_CAP_CHUNKED_PREFILL || p + 1 <= s_->limits.max_num_batched_tokens) {
    st = run_step(*s_, {{&r, p + 1}}, &recomputed);
  } else {
    st = run_step(*s_, {{&r, p, false}}, nullptr);
    if (st.ok()) st = run_step(*s_, {{&r, 1}}, &recomputed);
  }
  ASSERT_TRUE(st.ok()) << describe(st);
  EXPECT_EQ(compare_rows(from_copy[0], recomputed[0], 1e-4), "")
      << "decoding on copied blocks differs from recomputing the prefix " CONTRACT_COPY;
}

// kv_cache_copy_blocks forks a sequence (one source to two destinations in one
// call); the source and both forks then decode the same token, each in its own
// step, and must give the same logits: the copy holds every layer's K and V,
// and copying leaves the source intact.
TEST_F(Paging, CopyBlocksForksDecodeAlike) {
  const int bs = s_->limits.block_size;
  int p = std::min(2 * bs + bs / 2 + 1, s_->limits.max_model_len - 2);
  if (!(s_->limits.capabilities & HALO_CAP_CHUNKED_PREFILL)) p = std::min(p, s_->limits.max_num_batched_tokens - 1);
  ASSERT_GT(p, 0);
  BlockPool pool(s_->num_blocks, 31);
  Seq a;
  a.tokens = random_tokens(p, s_->vocab, 41);
  ASSERT_TRUE(pool.reserve(a, p, bs));
  Status st = run_step(*s_, {{&a, p, false}}, nullptr);
  ASSERT_TRUE(st.ok()) << describe(st);
  Seq forks[2] = {a, a};
  std::vector<int32_t> src, dst;
  for (Seq& f : forks) {
    f.blocks.clear();
    ASSERT_TRUE(pool.reserve(f, p, bs)) << "KV cache too small";
    src.insert(src.end(), a.blocks.begin(), a.blocks.end());
    dst.insert(dst.end(), f.blocks.begin(), f.blocks.end());
  }
  halo_kv_cache_copy_blocks_args ca{};
  ca.struct_size = sizeof ca;
  ca.kv_cache = s_->kv.get();
  ca.src_blocks = src.data();
  ca.dst_blocks = dst.data();
  ca.num_pairs = static_cast<int32_t>(src.size());
  st = take(api(), api()->kv_cache_copy_blocks(&ca));
  ASSERT_TRUE(st.ok()) << "kv_cache_copy_blocks, one source to two destinations: " << describe(st) << " " CONTRACT_COPY;
  std::vector<std::vector<float>> rows[3];
  Seq* seqs[3] = {&a, &forks[0], &forks[1]};
  for (int i = 0; i < 3; ++i) {
    seqs[i]->tokens.push_back(7);
    ASSERT_TRUE(pool.reserve(*seqs[i], p + 1, bs)) << "KV cache too small";
    st = run_step(*s_, {{seqs[i], 1}}, &rows[i]);
    ASSERT_TRUE(st.ok()) << describe(st);
  }
  for (int i = 1; i < 3; ++i)
    EXPECT_EQ(compare_rows(rows[i][0], rows[0][0], 1e-6), "")
        << "fork " << i << " decodes differently from the sequence it was copied from " CONTRACT_COPY;
}

TEST_F(Paging, FreedBlocksReusedWithoutStaleState) {
  const int bs = s_->limits.block_size;
  const int long_len = std::min(4 * bs + 3, s_->limits.max_model_len - 1);
  const int short_len = std::max(1, std::min(bs + 1, long_len - 2));
  // Fill blocks with a long sequence, free them, reuse them for a short one.
  BlockPool pool(s_->num_blocks, 5);
  Seq a;
  a.tokens = random_tokens(long_len, s_->vocab, 31);
  ASSERT_TRUE(pool.reserve(a, long_len, bs));
  Workload dummy;
  Status st = run_step(*s_, {{&a, std::min(long_len, s_->limits.max_num_batched_tokens), false}}, nullptr);
  ASSERT_TRUE(st.ok()) << describe(st);
  Seq b;
  b.tokens = random_tokens(short_len, s_->vocab, 32);
  b.blocks = a.blocks;  // the freed blocks, stale K/V beyond b's context
  std::vector<std::vector<float>> reused, fresh_rows;
  st = run_step(*s_, {{&b, short_len}}, &reused);
  ASSERT_TRUE(st.ok()) << describe(st);
  for (int i = 0; i < 3; ++i) {  // a few decodes inside the stale region
    b.tokens.push_back(argmax(reused.back()));
    std::vector<std::vector<float>> rows;
    st = run_step(*s_, {{&b, 1}}, &rows);
    ASSERT_TRUE(st.ok()) << describe(st);
    reused.push_back(rows[0]);
  }
  ASSERT_TRUE(new_kv_cache(*s_, s_->num_blocks).ok());
  Seq f;
  f.tokens = b.tokens;
  f.blocks = a.blocks;
  st = run_step(*s_, {{&f, short_len}}, &fresh_rows);
  ASSERT_TRUE(st.ok()) << describe(st);
  for (int i = 0; i < 3; ++i) {
    std::vector<std::vector<float>> rows;
    st = run_step(*s_, {{&f, 1}}, &rows);
    ASSERT_TRUE(st.ok()) << describe(st);
    fresh_rows.push_back(rows[0]);
  }
  for (size_t i = 0; i < reused.size(); ++i) {
    EXPECT_EQ(compare_rows(reused[i], fresh_rows[i], 1e-4), "")
        << "output " << i << " on reused blocks differs from a fresh cache " CONTRACT_STALE;
  }
}

// =================================================================== limits

TEST_F(Conformance, LimitsNegotiation) {
  const Model& m = tiny_model();
  for (const Proposal& p : {Proposal{}, Proposal{0, 0, 0, 0}, Proposal{3, 40, 24, 8}}) {
    SCOPED_TRACE("proposed seqs " + std::to_string(p.max_num_seqs) + " len " + std::to_string(p.max_model_len) +
                 " tokens " + std::to_string(p.max_num_batched_tokens) + " block " + std::to_string(p.block_size));
    Status st;
    auto s = session_for(plugin(), m, p, &st);
    ASSERT_TRUE(s) << describe(st) << " " CONTRACT_LIMITS;
    const halo_limits& L = s->limits;
    EXPECT_GT(L.kv_bytes_per_block, 0u) << CONTRACT_LIMITS;
    EXPECT_GT(L.kv_memory_available, 0u) << CONTRACT_LIMITS;
    EXPECT_LE(L.max_model_len, std::max(m.spec.max_position_embeddings, L.max_model_len)) << CONTRACT_LIMITS;
    if (props().required_block_size > 0) {
      EXPECT_EQ(L.block_size, props().required_block_size) << "the device requires its block size " CONTRACT_LIMITS;
    }
    if (props().max_batch_size > 0) {
      EXPECT_LE(L.max_num_seqs, props().max_batch_size) << CONTRACT_LIMITS;
    }
    if (props().max_model_len > 0) {
      EXPECT_LE(L.max_model_len, props().max_model_len) << CONTRACT_LIMITS;
    }
    if (!claims(HALO_CAP_STATIC_SHAPES)) {
      // A dynamic-shape device honours what the core proposes (0 = its choice).
      if (p.max_num_seqs) {
        EXPECT_EQ(L.max_num_seqs, p.max_num_seqs) << CONTRACT_LIMITS;
      }
      if (p.max_model_len) {
        EXPECT_EQ(L.max_model_len, p.max_model_len) << CONTRACT_LIMITS;
      }
      if (p.max_num_batched_tokens) {
        EXPECT_EQ(L.max_num_batched_tokens, p.max_num_batched_tokens) << CONTRACT_LIMITS;
      }
      if (p.block_size && !props().required_block_size) {
        EXPECT_EQ(L.block_size, p.block_size) << CONTRACT_LIMITS;
      }
    }
    if (!(L.capabilities & HALO_CAP_CHUNKED_PREFILL)) {
      EXPECT_GE(L.max_num_batched_tokens, L.max_model_len)
          << "without chunked prefill a whole prompt must fit one step " CONTRACT_LIMITS;
    }
  }
}

TEST_F(Conformance, LimitsStepsBeyondAreRefused) {
  Proposal p{4, 48, 32, 0};
  auto s = tiny_session(p, 0);
  ASSERT_TRUE(s);
  const halo_limits L = s->limits;
  const int bs = L.block_size;
  std::cout << "[ limits ] agreed seqs " << L.max_num_seqs << ", len " << L.max_model_len << ", tokens "
            << L.max_num_batched_tokens << ", block " << bs << ", caps 0x" << std::hex << L.capabilities << std::dec
            << "\n";
  const int need_blocks = (L.max_model_len + 1 + bs - 1) / bs + L.max_num_seqs + 4;
  ASSERT_TRUE(new_kv_cache(*s, std::max(s->num_blocks, need_blocks)).ok());
  Session& S = *s;
  auto expect_refused = [&](const std::string& what, std::function<std::vector<Seq>()> make,
                            std::function<std::vector<Chunk>(std::vector<Seq>&)> chunks, const std::string& hint) {
    expect_error(what, [&] {
      std::vector<Seq> seqs = make();
      BlockPool pool(S.num_blocks, 0);
      for (auto& q : seqs)
        if (!pool.reserve(q, static_cast<int>(q.tokens.size()), bs)) return Status{HALO_STATUS_OK, "(pool)"};
      auto batch = chunks(seqs);
      return run_step(S, batch, nullptr);
    }, {HALO_STATUS_INVALID_ARGUMENT, HALO_STATUS_OUT_OF_RANGE}, hint);
  };
  if (L.max_num_seqs <= 512) {
    expect_refused("execute(num_seqs=max_num_seqs+1=" + std::to_string(L.max_num_seqs + 1) + ")", [&] {
      std::vector<Seq> v(static_cast<size_t>(L.max_num_seqs + 1));
      for (auto& q : v) q.tokens = {1};
      return v;
    }, [](std::vector<Seq>& v) {
      std::vector<Chunk> c;
      for (auto& q : v) c.push_back({&q, 1});
      return c;
    }, "num_seqs");
  }
  if (L.max_num_batched_tokens <= 8192) {
    const int T = L.max_num_batched_tokens + 1;
    const int per = std::min(T, L.max_model_len);
    const int nseq = (T + per - 1) / per;
    if (nseq <= L.max_num_seqs) {
      expect_refused("execute(num_tokens=max_num_batched_tokens+1=" + std::to_string(T) + ")", [&] {
        std::vector<Seq> v(static_cast<size_t>(nseq));
        int left = T;
        for (auto& q : v) {
          q.tokens = random_tokens(std::min(left, per), S.vocab, 3);
          left -= static_cast<int>(q.tokens.size());
        }
        return v;
      }, [](std::vector<Seq>& v) {
        std::vector<Chunk> c;
        for (auto& q : v) c.push_back({&q, static_cast<int>(q.tokens.size())});
        return c;
      }, "num_tokens");
    }
  }
  expect_refused("execute(context_lens[0]=max_model_len+1=" + std::to_string(L.max_model_len + 1) + ")", [&] {
    std::vector<Seq> v(1);
    v[0].tokens = random_tokens(L.max_model_len + 1, S.vocab, 4);
    v[0].cached = L.max_model_len;  // pretend the prefix is cached; one more token
    return v;
  }, [](std::vector<Seq>& v) { return std::vector<Chunk>{{&v[0], 1}}; }, "context_lens");
  // Refused steps leave no trace: a valid workload still matches a fresh session.
  Workload w;
  w.prompts = make_prompts(S, {7, 3}, 3, 50);
  w.outputs = 3;
  const WorkloadResult after = run_workload(S, w);
  ASSERT_TRUE(after.status.ok()) << describe(after.status) << " " CONTRACT_LIMITS;
  auto fresh = tiny_session(p, 0);
  ASSERT_TRUE(fresh);
  w.forced = &after.argmax;
  const WorkloadResult want = run_workload(*fresh, w);
  EXPECT_EQ(compare_results(after, want, 1e-4, true), "") << "a refused step changed later results " CONTRACT_LIMITS;
}

TEST_F(Conformance, LimitsSmallerBatchesAreCorrect) {
  // Static-shape devices pad a step to their compiled batch; every batch size
  // up to the limit must give the logits each sequence gets alone.
  ModelConfig mc = family("qwen2");
  mc.dtype = preferred_dtype();
  const Model m(mc);
  Status st;
  auto s = session_for(plugin(), m, {}, &st);
  ASSERT_TRUE(s) << describe(st);
  const int max = std::min(s->limits.max_num_seqs, 8);
  std::vector<int> sizes{1, 2, 3, max - 1, max};
  sizes.erase(std::remove_if(sizes.begin(), sizes.end(), [&](int b) { return b < 1 || b > max; }), sizes.end());
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  const auto prompts = make_prompts(*s, {6, 2, 11, 4, 9, 1, 7, 3}, 3, 600);
  // Each prompt alone (on the reference when present, else on the plugin).
  std::optional<Session> r;
  if (reference()) r = reference_like(*s, m, &st);
  Session& solo_on = r ? *r : *s;
  std::vector<WorkloadResult> alone;
  for (int i = 0; i < max; ++i) {
    Workload w;
    w.prompts = {prompts[static_cast<size_t>(i)]};
    w.outputs = 3;
    alone.push_back(run_workload(solo_on, w));
    ASSERT_TRUE(alone.back().status.ok()) << describe(alone.back().status);
  }
  for (int b : sizes) {
    Workload w;
    w.prompts.assign(prompts.begin(), prompts.begin() + b);
    w.outputs = 3;
    std::vector<std::vector<int32_t>> forced;
    for (int i = 0; i < b; ++i) forced.push_back(alone[static_cast<size_t>(i)].argmax[0]);
    w.forced = &forced;
    const WorkloadResult got = run_workload(*s, w);
    ASSERT_TRUE(got.status.ok()) << "batch of " << b << ": " << describe(got.status) << " " CONTRACT_PADDING;
    for (int i = 0; i < b; ++i)
      for (size_t o = 0; o < got.rows[static_cast<size_t>(i)].size(); ++o) {
        EXPECT_EQ(compare_rows(got.rows[static_cast<size_t>(i)][o], alone[static_cast<size_t>(i)].rows[0][o],
                               r ? tolerance_for(*s).value : 1e-4),
                  "")
            << "batch of " << b << ", sequence " << i << ", output " << o << " " CONTRACT_PADDING;
      }
  }
}

TEST_F(Conformance, LimitsLogitsRowsAsRequested) {
  auto s = tiny_session(small_blocks());
  ASSERT_TRUE(s);
  const int bs = s->limits.block_size;
  auto run = [&](std::vector<int32_t> order, bool all) {
    BlockPool pool(s->num_blocks, 0);
    std::vector<Seq> q(3);
    for (size_t i = 0; i < q.size(); ++i) {
      q[i].tokens = random_tokens(3 + static_cast<int>(i), s->vocab, 70 + static_cast<uint32_t>(i));
      pool.reserve(q[i], static_cast<int>(q[i].tokens.size()), bs);
    }
    std::vector<std::vector<float>> rows;
    StepExtras x;
    x.logits_order = order;
    std::vector<Chunk> batch;
    for (auto& sq : q) batch.push_back({&sq, static_cast<int>(sq.tokens.size()), true, all});
    const Status st = run_step(*s, batch, &rows, x);
    EXPECT_TRUE(st.ok()) << describe(st);
    return rows;
  };
  if ((s->limits.capabilities & HALO_CAP_CHUNKED_PREFILL) == 0 && s->limits.max_num_batched_tokens < 12)
    GTEST_SKIP() << "a 12-token step does not fit the agreed limits";
  if ((s->limits.capabilities & HALO_CAP_MIXED_BATCH) == 0)
    GTEST_SKIP() << "the device runs one prefill per step (no HALO_CAP_MIXED_BATCH); this test prefills three "
                    "sequences in one step";
  const auto natural = run({}, false);
  const auto reversed = run({2, 1, 0}, false);
  ASSERT_EQ(natural.size(), 3u);
  ASSERT_EQ(reversed.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(compare_rows(reversed[i], natural[i], 1e-5), "")
        << "logits_indices in reverse order: row " << i << " " CONTRACT_LIMITS;
  }
  const auto all = run({}, true);  // every token's logits; the last of each sequence equals the natural rows
  ASSERT_EQ(all.size(), 12u);
  EXPECT_EQ(compare_rows(all[2], natural[0], 1e-4), "") << CONTRACT_LIMITS;
  EXPECT_EQ(compare_rows(all[6], natural[1], 1e-4), "") << CONTRACT_LIMITS;
  EXPECT_EQ(compare_rows(all[11], natural[2], 1e-4), "") << CONTRACT_LIMITS;
}

// ========================================================== tensor parallel

TEST_F(Conformance, TensorParallelEqualsOneChip) {
  const Settings& cfg = settings();
  if (cfg.tp_option.empty()) {
    if (props().num_chips > 1)
      GTEST_SKIP() << "the device has " << props().num_chips
                   << " chips but no --tp-option names how to select a degree; the golden tests compare its default "
                      "against the one-chip reference";
    GTEST_SKIP() << "one chip and no --tp-option";
  }
  std::vector<int> degrees = cfg.tp_degrees;
  if (degrees.empty()) degrees = {1, props().num_chips};
  ModelConfig mc = family("llama");
  mc.dtype = preferred_dtype();
  const Model m(mc);
  Workload w;
  std::optional<WorkloadResult> first;
  for (int d : degrees) {
    SessionOptions o;
    o.use_settings_options = false;
    for (const auto& kv : cfg.device_options)
      if (kv.first != cfg.tp_option) o.device_options.push_back(kv);
    for (const auto& kv : cfg.prepare_options)
      if (kv.first != cfg.tp_option) o.prepare_options.push_back(kv);
    for (const auto& kv : cfg.compile_options)
      if (kv.first != cfg.tp_option) o.compile_options.push_back(kv);
    o.device_options.emplace_back(cfg.tp_option, std::to_string(d));
    o.prepare_options.emplace_back(cfg.tp_option, std::to_string(d));
    o.compile_options.emplace_back(cfg.tp_option, std::to_string(d));
    Status st;
    auto s = make_session(plugin(), dev(), m, o, &st);
    ASSERT_TRUE(s) << cfg.tp_option << "=" << d << ": " << describe(st) << " " CONTRACT_TP;
    if (!first) {
      w.prompts = make_prompts(*s, {9, 21, 4}, 5, 800);
      w.outputs = 5;
    }
    WorkloadResult r = run_workload(*s, w);
    ASSERT_TRUE(r.status.ok()) << cfg.tp_option << "=" << d << ": " << describe(r.status) << " " CONTRACT_TP;
    if (!first) {
      first = std::move(r);
      w.forced = &first->argmax;
      continue;
    }
    const Tolerance tol = tolerance_for(*s);
    std::cout << "[ tp ] " << cfg.tp_option << "=" << d << " against " << degrees[0] << ": max error "
              << max_error(r, *first) << ", tolerance " << tol.value << " (" << tol.why << ")\n";
    EXPECT_EQ(compare_results(r, *first, tol.value, true), "")
        << cfg.tp_option << "=" << d << " against " << cfg.tp_option << "=" << degrees[0] << ", tolerance "
        << tol.value << " (" << tol.why << ") " CONTRACT_TP;
  }
}

}  // namespace
}  // namespace conf
