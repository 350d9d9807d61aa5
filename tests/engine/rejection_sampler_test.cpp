// Rejection sampling (engine/spec_decode/rejection_sampler.h) against the
// distribution it must preserve, on hand-made distributions: a toy "model"
// whose next-token distribution depends on the previous token, decoded two
// tokens at a time with proposals, must give the joint distribution of
// sampling the model directly (chi-square, alpha = 1e-3, fixed seeds so the
// test is deterministic). A deliberately wrong rule must fail the same test.
#include "engine/spec_decode/rejection_sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

using namespace halo::engine;
using namespace halo::engine::spec;

namespace {

constexpr int kVocab = 6;

TokenDist make_dist(std::vector<float> w) {
  TokenDist d;
  for (int i = 0; i < static_cast<int>(w.size()); ++i) {
    if (w[i] <= 0) continue;
    d.ids.push_back(i);
    d.weights.push_back(w[i]);
    d.total += w[i];
  }
  return d;
}

// The toy target: p(next | previous token), previous = -1 at the start.
TokenDist target(int prev) {
  switch (prev) {
    case -1:
      return make_dist({4, 3, 2, 1, 0, 0});
    case 0:
      return make_dist({1, 1, 1, 1, 1, 5});
    case 1:
      return make_dist({0, 6, 0, 2, 1, 1});
    default:
      return make_dist({2, 1, 0, 3, 1, 3});
  }
}

// A proposer's distribution: close to the target but not equal.
TokenDist draft(int /*prev*/) { return make_dist({1, 1, 1, 1, 1, 1}); }

struct Options {
  bool one_hot = false;  // prompt lookup: a fixed proposal, q one-hot
  AcceptRule rule = AcceptRule::kLossless;
  int k = 2;
};

// Samples (t0, t1) `n` times through verify_proposals; returns the counts.
std::map<std::pair<int, int>, int> sample_pairs(const Options& o, int n) {
  std::mt19937_64 rng(99), proposer_rng(7);
  std::map<std::pair<int, int>, int> counts;
  std::vector<int32_t> out;
  for (int s = 0; s < n; ++s) {
    std::vector<int32_t> seq;
    while (seq.size() < 2) {
      // Proposals continue from the last token; q from the draft (or one-hot on a fixed guess).
      std::vector<int32_t> props;
      std::vector<TokenDist> q;
      int prev = seq.empty() ? -1 : seq.back();
      for (int j = 0; j < o.k; ++j) {
        TokenDist qd = draft(prev);
        int32_t t = o.one_hot ? (prev + 2 + j) % kVocab : Sampler::draw(qd, proposer_rng);
        props.push_back(t);
        q.push_back(qd);
        prev = t;
      }
      TokenDist row;
      auto dist_of = [&](int j) -> const TokenDist& {
        int p = j == 0 ? (seq.empty() ? -1 : seq.back()) : props[j - 1];
        row = target(p);
        return row;
      };
      out.clear();
      verify_proposals(props, o.one_hot ? std::span<const TokenDist>() : q, dist_of, rng, out,
                       o.rule);
      seq.insert(seq.end(), out.begin(), out.end());
    }
    counts[{seq[0], seq[1]}]++;
  }
  return counts;
}

// Pearson's statistic against p(t0) p(t1 | t0), bins under 5 expected pooled;
// returns statistic minus the alpha = 1e-3 critical value (Wilson-Hilferty).
double chi_square_excess(const std::map<std::pair<int, int>, int>& counts, int n) {
  double stat = 0, pooled_obs = 0, pooled_exp = 0;
  int bins = 0;
  TokenDist p0 = target(-1);
  for (int a = 0; a < kVocab; ++a)
    for (int b = 0; b < kVocab; ++b) {
      double e = n * p0.prob(a) * target(a).prob(b);
      auto it = counts.find({a, b});
      double obs = it == counts.end() ? 0 : it->second;
      if (e == 0) {
        if (obs > 0) return INFINITY;  // an impossible pair was emitted
        continue;
      }
      if (e < 5) {
        pooled_obs += obs, pooled_exp += e;
        continue;
      }
      stat += (obs - e) * (obs - e) / e;
      ++bins;
    }
  if (pooled_exp > 0)
    stat += (pooled_obs - pooled_exp) * (pooled_obs - pooled_exp) / pooled_exp, ++bins;
  const double df = bins - 1, z = 3.090;  // upper 1e-3 quantile of N(0, 1)
  const double crit = df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);
  return stat - crit;
}

}  // namespace

TEST(RejectionSampler, GreedyAcceptsTheArgmaxPrefixThenCorrects) {
  TokenDist g;
  g.greedy = true;
  g.ids = {3};
  g.weights = {1};
  g.total = 1;
  std::vector<int32_t> argmax = {3, 4, 1, 2};
  TokenDist row;
  auto dist_of = [&](int j) -> const TokenDist& {
    row = g;
    row.ids = {argmax[static_cast<size_t>(j)]};
    return row;
  };
  std::mt19937_64 rng(1), untouched(1);
  std::vector<int32_t> out;
  EXPECT_EQ(verify_proposals(std::vector<int32_t>{3, 4, 5}, {}, dist_of, rng, out), 2);
  EXPECT_EQ(out, (std::vector<int32_t>{3, 4, 1}));
  out.clear();
  EXPECT_EQ(verify_proposals(std::vector<int32_t>{3, 4, 1}, {}, dist_of, rng, out), 3);
  EXPECT_EQ(out, (std::vector<int32_t>{3, 4, 1, 2}));  // all accepted: the bonus token
  EXPECT_EQ(rng(), untouched());                       // greedy draws nothing
}

TEST(RejectionSampler, OneHotProposalsKeepTheTargetDistribution) {
  const int n = 200000;
  EXPECT_LT(chi_square_excess(sample_pairs({.one_hot = true}, n), n), 0);
}

TEST(RejectionSampler, DraftDistributionProposalsKeepTheTargetDistribution) {
  const int n = 200000;
  EXPECT_LT(chi_square_excess(sample_pairs({.one_hot = false}, n), n), 0);
  EXPECT_LT(chi_square_excess(sample_pairs({.one_hot = false, .k = 1}, n), n), 0);
}

TEST(RejectionSampler, AWrongRuleFailsTheSameTest) {
  const int n = 200000;
  EXPECT_GT(
      chi_square_excess(sample_pairs({.one_hot = true, .rule = AcceptRule::kAlwaysAccept}, n), n),
      0);
  EXPECT_GT(
      chi_square_excess(sample_pairs({.one_hot = false, .rule = AcceptRule::kAlwaysAccept}, n), n),
      0);
}
