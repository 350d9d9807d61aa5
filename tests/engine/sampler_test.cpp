#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "common/error.h"
#include "engine/sampler.h"

using namespace halo::engine;

namespace {
int32_t draw(Sampler& s, std::vector<float> logits, const SamplingParams& p, std::mt19937_64& rng) {
  return s.sample(logits, p, {}, {}, rng).sampled.token;
}
}  // namespace

TEST(Sampler, GreedyPicksArgmaxAndReportsItsLogprob) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0;
  std::mt19937_64 rng(1);
  std::vector<float> l = {0.1f, 2.0f, -1.0f, 1.5f};
  auto r = s.sample(l, p, {}, {}, rng);
  EXPECT_EQ(r.sampled.token, 1);
  double z = std::exp(0.1) + std::exp(2.0) + std::exp(-1.0) + std::exp(1.5);
  EXPECT_NEAR(r.sampled.logprob, 2.0 - std::log(z), 1e-5);
}

TEST(Sampler, SameSeedSameTokens) {
  Sampler s;
  SamplingParams p;
  p.temperature = 1.0f;
  std::vector<float> l(100);
  for (int i = 0; i < 100; ++i) l[i] = std::sin(float(i));
  std::mt19937_64 a(42), b(42);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(draw(s, l, p, a), draw(s, l, p, b));
}

TEST(Sampler, TopKOneIsGreedy) {
  Sampler s;
  SamplingParams p;
  p.temperature = 5.0f;
  p.top_k = 1;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(draw(s, {0.0f, 0.5f, 0.4f}, p, rng), 1);
}

TEST(Sampler, TopPKeepsOnlyTheNucleus) {
  Sampler s;
  SamplingParams p;
  p.top_p = 0.5f;
  std::mt19937_64 rng(3);
  // probabilities ~ 0.64, 0.24, 0.09, 0.03: the nucleus at 0.5 is token 0 alone.
  std::vector<float> l = {3.0f, 2.0f, 1.0f, 0.0f};
  for (int i = 0; i < 50; ++i) EXPECT_EQ(draw(s, l, p, rng), 0);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  Sampler s;
  SamplingParams p;
  p.min_p = 0.2f;
  std::mt19937_64 rng(5);
  std::vector<float> l = {2.0f, 1.9f, -3.0f, -3.0f};  // last two are < 0.2 x the best
  std::map<int, int> seen;
  for (int i = 0; i < 200; ++i) seen[draw(s, l, p, rng)]++;
  EXPECT_EQ(seen.count(2) + seen.count(3), 0u);
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
}

TEST(Sampler, SamplingFollowsTheDistribution) {
  Sampler s;
  SamplingParams p;
  std::mt19937_64 rng(11);
  std::vector<float> l = {std::log(0.7f), std::log(0.2f), std::log(0.1f)};
  std::map<int, int> seen;
  const int n = 20000;
  for (int i = 0; i < n; ++i) seen[draw(s, l, p, rng)]++;
  EXPECT_NEAR(seen[0] / double(n), 0.7, 0.02);
  EXPECT_NEAR(seen[1] / double(n), 0.2, 0.02);
  EXPECT_NEAR(seen[2] / double(n), 0.1, 0.02);
}

TEST(Sampler, RepetitionPenaltyDemotesSeenTokens) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  std::mt19937_64 rng(1);
  std::vector<float> l = {1.0f, 1.5f};
  std::vector<int32_t> prompt = {1};
  EXPECT_EQ(s.sample(l, p, prompt, {}, rng).sampled.token, 0);  // 1.5/2 < 1.0
}

TEST(Sampler, FrequencyPenaltyCountsOutputTokens) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0;
  p.frequency_penalty = 0.3f;
  std::mt19937_64 rng(1);
  std::vector<float> l = {1.0f, 1.5f};
  std::vector<int32_t> out = {1, 1};
  EXPECT_EQ(s.sample(l, p, {}, out, rng).sampled.token, 0);  // 1.5 - 0.6 < 1.0
  std::vector<float> l2 = {1.0f, 1.5f};
  std::vector<int32_t> once = {1};
  EXPECT_EQ(s.sample(l2, p, {}, once, rng).sampled.token, 1);  // 1.2 > 1.0
}

TEST(SamplingParams, RejectsOutOfRangeValuesNamingTheField) {
  SamplingParams p;
  p.top_p = 0.0f;
  try {
    p.validate();
    FAIL() << "expected an error";
  } catch (const halo::Error& e) {
    EXPECT_NE(std::string(e.what()).find("top_p"), std::string::npos);
  }
  SamplingParams q;
  q.temperature = -1;
  EXPECT_THROW(q.validate(), halo::Error);
  SamplingParams r;
  r.max_tokens = 0;
  EXPECT_THROW(r.validate(), halo::Error);
}

TEST(Sampler, TopLogprobsAreTheMostLikelyInOrder) {
  std::vector<float> l = {0.5f, 3.0f, 1.0f, 3.0f, -2.0f};
  auto r = token_logprob(l, 2, 3);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].first, 1);  // tie with 3: lower id first
  EXPECT_EQ(r.top[1].first, 3);
  EXPECT_EQ(r.top[2].first, 2);
  double z = 0;
  for (float v : l) z += std::exp(double(v));
  EXPECT_NEAR(r.logprob, 1.0 - std::log(z), 1e-5);
  EXPECT_NEAR(r.top[0].second, 3.0 - std::log(z), 1e-5);
}
