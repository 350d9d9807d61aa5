// Beam search and parallel sampling in the engine, on the real CPU plugin and
// the embedded model: beams (and n > 1 choices) share the prompt's KV blocks,
// abort and preemption free every beam, a beam search gives the same result
// alone or beside other requests on a tiny pool. (Its output against an
// independent numpy beam search: tests/integration/beam_search_test.py.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>

#include "engine/llm_engine.h"
#include "demo_engine.h"

namespace fs = std::filesystem;
using namespace halo;
using namespace halo::engine;

namespace {

const std::string kPluginPath = test_support::kCpuPlugin;
using test_support::demo_model;

EngineConfig config(int kv_tokens = 1 << 14) {
  EngineConfig c;
  c.device = kPluginPath;
  c.max_model_len = 256;
  c.max_num_seqs = 32;
  c.max_kv_tokens = kv_tokens;
  c.block_size = 16;
  return c;
}

std::vector<int32_t> prompt(int len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(7, 4095);
  std::vector<int32_t> p(static_cast<size_t>(len));
  for (auto& t : p) t = tok(rng);
  return p;
}

SamplingParams params(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

struct Outcome {
  std::map<std::string, std::vector<BeamHypothesis>> beams;
  std::map<std::string, std::vector<int32_t>> tokens;
  int peak_blocks = 0;
};

// Steps until nothing is left, recording every output and the most KV blocks held.
Outcome run(LLMEngine& eng) {
  Outcome r;
  while (eng.has_unfinished()) {
    for (auto& o : eng.step()) {
      if (!o.beams.empty()) r.beams[o.request_id] = o.beams;
      auto& v = r.tokens[o.request_id];
      v.insert(v.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
    const int used =
        static_cast<int>(std::lround(eng.stats().kv_cache_usage * eng.num_kv_blocks()));
    r.peak_blocks = std::max(r.peak_blocks, used);
  }
  return r;
}

BeamParams width(int w) {
  BeamParams b;
  b.width = w;
  return b;
}

}  // namespace

TEST(BeamEngine, WidthOneIsGreedy) {
  const auto p = prompt(20, 1);
  LLMEngine eng(config(), demo_model());
  eng.add_request("greedy", p, params(12));
  eng.add_beam_request("beam", p, params(12), width(1));
  Outcome r = run(eng);
  ASSERT_EQ(r.beams["beam"].size(), 1u);
  EXPECT_EQ(r.beams["beam"][0].tokens, r.tokens["greedy"]);
}

TEST(BeamEngine, BeamsShareThePromptBlocks) {
  // 64 prompt tokens = 4 full blocks; 4 beams of 20 tokens.
  const auto p = prompt(64, 2);
  const int kBlocksPerSeq = (64 + 20 + 15) / 16;  // 6
  LLMEngine eng(config(), demo_model());
  eng.add_beam_request("beam", p, params(20), width(4));
  Outcome r = run(eng);
  ASSERT_EQ(r.beams["beam"].size(), 4u);
  std::printf(
      "[ blocks ] 4 beams of 20 on a 64-token prompt: peak %d blocks (4 sequences apart: %d)\n",
      r.peak_blocks, 4 * kBlocksPerSeq);
  for (const auto& h : r.beams["beam"]) EXPECT_EQ(h.tokens.size(), 20u);
  // Independent sequences would hold 4 x 6 = 24 blocks; sharing: the prompt's
  // 3 blocks before the copied last one, plus at most 3 private blocks per beam
  // (its copy of block 4 and the 20 new tokens), plus transient forks.
  EXPECT_LE(r.peak_blocks, 3 + 4 * 3 + 4) << "beams did not share the prompt";
  EXPECT_LT(r.peak_blocks, 4 * kBlocksPerSeq);
  EXPECT_EQ(eng.stats().kv_cache_usage, 0.0f) << "blocks leaked";
}

TEST(ParallelSampling, NFourHoldsOnePromptPlusFourContinuations) {
  const auto p = prompt(64, 3);
  LLMEngine eng(config(), demo_model());
  std::vector<SamplingParams> ps(4, params(20));
  for (auto& s : ps) s.temperature = 1.0f;
  eng.add_request_group({"c0", "c1", "c2", "c3"}, p, ps);
  Outcome r = run(eng);
  for (const char* id : {"c0", "c1", "c2", "c3"}) EXPECT_EQ(r.tokens[id].size(), 20u) << id;
  std::printf(
      "[ blocks ] n=4 x 20 tokens on a 64-token prompt: peak %d blocks, %llu prompt tokens "
      "computed\n",
      r.peak_blocks, static_cast<unsigned long long>(eng.stats().prompt_tokens));
  // One prompt (3 shared blocks + each choice's copy of the 4th) + 2 blocks of
  // continuation each: 3 + 4 x 3 = 15, against 4 x 6 = 24 prefilled apart.
  EXPECT_EQ(r.peak_blocks, 3 + 4 * 3);
  EXPECT_EQ(eng.stats().prompt_tokens, 64u + 3u) << "the prompt was prefilled more than once";
}

TEST(BeamEngine, AbortFreesEveryBeam) {
  LLMEngine eng(config(), demo_model());
  eng.add_beam_request("beam", prompt(40, 4), params(100), width(4));
  for (int i = 0; i < 6; ++i) eng.step();
  EXPECT_GT(eng.stats().kv_cache_usage, 0.0f);
  EXPECT_TRUE(eng.abort_request("beam"));
  EXPECT_EQ(eng.stats().kv_cache_usage, 0.0f);
  EXPECT_FALSE(eng.has_unfinished());
}

TEST(BeamEngine, SameResultAloneOrOnATinyPoolWithPreemption) {
  const auto p1 = prompt(50, 5), p2 = prompt(70, 6);
  auto alone = [&](const std::vector<int32_t>& p) {
    LLMEngine eng(config(), demo_model());
    eng.add_beam_request("b", p, params(24), width(3));
    return run(eng).beams["b"];
  };
  const auto a1 = alone(p1), a2 = alone(p2);
  EngineConfig c = config(24 * 16);  // 24 blocks: two beam searches and 6 requests do not fit
  LLMEngine eng(c, demo_model());
  eng.add_beam_request("b1", p1, params(24), width(3));
  for (int i = 0; i < 6; ++i)
    eng.add_request("r" + std::to_string(i), prompt(40, 10 + i), params(30));
  eng.add_beam_request("b2", p2, params(24), width(3));
  Outcome r = run(eng);
  EXPECT_GT(eng.stats().num_preemptions, 0u) << "the pool was meant to be too small";
  EXPECT_EQ(eng.stats().kv_cache_usage, 0.0f) << "blocks leaked";
  for (auto [id, want] : {std::pair{"b1", &a1}, std::pair{"b2", &a2}}) {
    const auto& got = r.beams[id];
    ASSERT_EQ(got.size(), want->size()) << id;
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k].tokens, (*want)[k].tokens) << id << " hypothesis " << k;
      EXPECT_NEAR(got[k].cumulative_logprob, (*want)[k].cumulative_logprob, 1e-3) << id << " " << k;
    }
  }
}

TEST(BeamEngine, RefusesAWidthBeyondMaxNumSeqs) {
  LLMEngine eng(config(), demo_model());
  EXPECT_THROW(eng.add_beam_request("b", prompt(8, 7), params(4), width(33)), Error);
  EXPECT_THROW(eng.add_beam_request("b", prompt(8, 7), params(4), width(0)), Error);
}
