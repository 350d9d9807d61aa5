// n / best_of on the real CPU plugin and the embedded model: a group of
// sequences on one prompt prefills it once (the followers fork from the
// leader's KV blocks) and yields what independent requests would.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>

#include "engine/async_engine.h"

namespace fs = std::filesystem;
using namespace halo;
using namespace halo::engine;

namespace {

const std::string kPluginPath = std::string(HALO_PLUGIN_DIR) + "/libhalo_plugin_cpu.so";

std::shared_ptr<const model::LoadedModel> demo_model() {
  static auto m = std::make_shared<const model::LoadedModel>(
      model::LoadedModel::load(fs::path(HALO_SOURCE_DIR) / "models" / "pkgchat-5m"));
  return m;
}

EngineConfig config(int kv_tokens = 1 << 14) {
  EngineConfig c;
  c.device = kPluginPath;
  c.max_model_len = 256;
  c.max_num_seqs = 64;
  c.max_kv_tokens = kv_tokens;
  c.block_size = 16;
  return c;
}

std::vector<int32_t> prompt_of(int len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(7, 4095);
  std::vector<int32_t> p(len);
  for (auto& t : p) t = tok(rng);
  return p;
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

SamplingParams seeded(uint64_t seed, int max_tokens) {
  SamplingParams p = greedy(max_tokens);
  p.temperature = 1.0f;
  p.top_p = 0.95f;
  p.seed = seed;
  return p;
}

std::vector<std::string> ids_for(const std::string& prefix, size_t n) {
  std::vector<std::string> ids;
  for (size_t i = 0; i < n; ++i) ids.push_back(prefix + std::to_string(i));
  return ids;
}

// Steps until nothing is left; the tokens of every sequence by id.
std::map<std::string, std::vector<int32_t>> drain(LLMEngine& eng) {
  std::map<std::string, std::vector<int32_t>> out;
  while (eng.has_unfinished())
    for (auto& o : eng.step()) {
      auto& v = out[o.request_id];
      v.insert(v.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
  return out;
}

// Each parameter set as its own request, one after another on a fresh engine.
std::vector<std::vector<int32_t>> run_alone(const std::vector<int32_t>& prompt,
                                            const std::vector<SamplingParams>& params) {
  LLMEngine eng(config(), demo_model());
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < params.size(); ++i) {
    eng.add_request("alone", prompt, params[i]);
    out.push_back(drain(eng)["alone"]);
  }
  return out;
}

}  // namespace

TEST(SharedPrompt, GreedyGroupOfFourEqualsOneRequestAndPrefillsOnce) {
  // 64 tokens end exactly on a block boundary (block_size 16); 70 do not.
  for (int len : {64, 70, 1}) {
    for (bool prefix_caching : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << "prompt_len=" << len << " prefix_caching=" << prefix_caching);
      auto prompt = prompt_of(len, 100 + len);
      const auto alone = run_alone(prompt, {greedy(12)})[0];
      EngineConfig c = config();
      c.enable_prefix_caching = prefix_caching;
      LLMEngine eng(c, demo_model());
      eng.add_request_group(ids_for("g", 4), prompt, std::vector<SamplingParams>(4, greedy(12)));
      auto out = drain(eng);
      ASSERT_EQ(out.size(), 4u);
      for (auto& [id, tokens] : out) EXPECT_EQ(tokens, alone) << id;
      EXPECT_EQ(eng.stats().prompt_tokens, uint64_t(len + 3))
          << "the prompt was prefilled more than once";
      EXPECT_EQ(eng.stats().kv_cache_usage, 0.0f) << "blocks leaked";
    }
  }
}

TEST(SharedPrompt, SeededChoicesEqualIndependentRequestsWithTheSameSeeds) {
  auto prompt = prompt_of(45, 7);
  std::vector<SamplingParams> params;
  for (uint64_t i = 0; i < 4; ++i) params.push_back(seeded(4242 + i, 20));
  const auto alone = run_alone(prompt, params);
  LLMEngine eng(config(), demo_model());
  eng.add_request_group(ids_for("s", 4), prompt, params);
  auto out = drain(eng);
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_EQ(out["s" + std::to_string(i)], alone[i]) << "choice " << i;
  EXPECT_NE(alone[0], alone[1]) << "the seeds were meant to give different choices";
  EXPECT_EQ(eng.stats().prompt_tokens, uint64_t(45 + 3));
}

TEST(SharedPrompt, AbortingAGroupFreesEveryBlockAtOnce) {
  LLMEngine eng(config(), demo_model());
  const int total = eng.num_kv_blocks();
  auto ids = ids_for("a", 4);
  eng.add_request_group(ids, prompt_of(70, 3), std::vector<SamplingParams>(4, greedy(50)));
  for (int s = 0; s < 3; ++s) eng.step();  // prefill, fork, a few decodes
  EXPECT_GT(eng.stats().num_running, 1u) << "the followers should have forked";
  for (const auto& id : ids) EXPECT_TRUE(eng.abort_request(id));
  EXPECT_FALSE(eng.has_unfinished());
  EXPECT_EQ(eng.stats().kv_cache_usage, 0.0f) << "of " << total << " blocks some leaked";
}

TEST(SharedPrompt, FollowersOfALeaderAbortedBeforeTheForkStillRunCorrectly) {
  auto prompt = prompt_of(90, 5);
  const auto alone = run_alone(prompt, {greedy(10)})[0];
  EngineConfig c = config();
  c.max_num_batched_tokens = 32;  // the leader's prompt takes three steps
  LLMEngine eng(c, demo_model());
  eng.add_request_group(ids_for("f", 3), prompt, std::vector<SamplingParams>(3, greedy(10)));
  eng.step();
  EXPECT_TRUE(eng.abort_request("f0"));
  auto out = drain(eng);
  EXPECT_EQ(out.count("f0"), 0u);
  EXPECT_EQ(out["f1"], alone);
  EXPECT_EQ(out["f2"], alone);
  EXPECT_EQ(eng.stats().kv_cache_usage, 0.0f);
}

TEST(SharedPrompt, ATinyPoolForcesPreemptionAndEveryChoiceStillCompletes) {
  auto prompt = prompt_of(100, 11);
  const auto alone = run_alone(prompt, {greedy(40)})[0];
  EngineConfig c = config(12 * 16);  // 12 blocks; four choices grow to 9 blocks each
  c.max_model_len = 160;
  LLMEngine eng(c, demo_model());
  ASSERT_EQ(eng.num_kv_blocks(), 12);
  eng.add_request_group(ids_for("p", 4), prompt, std::vector<SamplingParams>(4, greedy(40)));
  auto out = drain(eng);
  ASSERT_EQ(out.size(), 4u);
  for (auto& [id, tokens] : out) EXPECT_EQ(tokens, alone) << id;
  EXPECT_GT(eng.stats().num_preemptions, 0u) << "the pool was meant to be too small";
  EXPECT_EQ(eng.stats().kv_cache_usage, 0.0f) << "blocks leaked";
}

TEST(SharedPrompt, AGroupIsQueuedWholeOrNotAtAll) {
  LLMEngine eng(config(), demo_model());
  auto bad = greedy(4);
  bad.temperature = -1;
  EXPECT_THROW(eng.add_request_group(ids_for("x", 2), {1, 2, 3}, {greedy(4), bad}), Error);
  EXPECT_THROW(eng.add_request_group({"y", "y"}, {1, 2, 3}, {greedy(4), greedy(4)}), Error);
  EXPECT_FALSE(eng.has_unfinished());
  // The ids of the refused groups are still free.
  eng.add_request_group(ids_for("x", 2), {1, 2, 3}, {greedy(4), greedy(4)});
  EXPECT_EQ(drain(eng).size(), 2u);
}

TEST(SharedPrompt, AsyncNAndBestOfPrefillThePromptOnce) {
  auto tok = text::Tokenizer::from_model_dir(fs::path(HALO_SOURCE_DIR) / "models" / "pkgchat-5m");
  AsyncEngine eng(config(), demo_model(), tok);
  auto prompt = prompt_of(50, 9);
  RequestOptions o;
  o.sampling = seeded(1, 8);
  o.n = 4;
  auto r = eng.generate({{prompt, o}});
  ASSERT_TRUE(r[0].error.empty()) << r[0].error;
  ASSERT_EQ(r[0].choices.size(), 4u);
  EXPECT_EQ(eng.metrics().prompt_tokens, uint64_t(50 + 3));
  EXPECT_EQ(eng.metrics().generation_tokens, 4u * 8u) << "counters lag the events they explain";
  // Choice i is what a lone request seeded seed + i gives (the seeds as before).
  std::vector<SamplingParams> params;
  for (uint64_t i = 0; i < 4; ++i) params.push_back(seeded(1 + i, 8));
  const auto alone = run_alone(prompt, params);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(r[0].choices[i].token_ids, alone[i]) << "choice " << i;

  o.n = 2;
  o.best_of = 5;
  r = eng.generate({{prompt, o}});
  ASSERT_EQ(r[0].choices.size(), 2u);
  EXPECT_EQ(eng.metrics().prompt_tokens, uint64_t(2 * 50 + 3 + 4));
}
