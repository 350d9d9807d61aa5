#include "engine/spec_decode/ngram_proposer.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "common/error.h"

using halo::engine::spec::propose_ngram;
using Tokens = std::vector<int32_t>;

namespace {

// propose_ngram on the whole sequence as prompt, no output.
Tokens propose(const Tokens& tokens, int min_n, int max_n, int k) {
  Tokens out;
  int n = propose_ngram(tokens, {}, min_n, max_n, k, out);
  EXPECT_EQ(n, static_cast<int>(out.size()));
  return out;
}

// The rule written plainly: for n from max_n down to min_n, the first start s whose n tokens
// equal the last n and are followed by at least one token; what follows, up to k tokens.
Tokens naive(const Tokens& t, int min_n, int max_n, int k) {
  const int total = static_cast<int>(t.size());
  for (int n = max_n; n >= min_n; --n) {
    for (int s = 0; s + n <= total - 1; ++s) {
      bool same = true;
      for (int i = 0; i < n; ++i) same = same && t[s + i] == t[total - n + i];
      if (!same) continue;
      Tokens out;
      for (int i = s + n; i < total && static_cast<int>(out.size()) < k; ++i) out.push_back(t[i]);
      return out;
    }
  }
  return {};
}

}  // namespace

TEST(NgramProposer, HandWrittenSequence) {
  const Tokens t = {1, 2, 3, 4, 9, 9, 1, 2, 3};
  EXPECT_EQ(propose(t, 1, 3, 2), (Tokens{4, 9}));
  EXPECT_EQ(propose(t, 1, 3, 4), (Tokens{4, 9, 9, 1}));
  // Fewer than k follow the match: the proposal runs to the end of the sequence.
  EXPECT_EQ(propose(t, 1, 3, 10), (Tokens{4, 9, 9, 1, 2, 3}));
}

TEST(NgramProposer, LongestNWins) {
  // The last token 2 first occurs at 0 (then 9); the last two, 1 2, occur at 2 (then 7).
  const Tokens t = {2, 9, 1, 2, 7, 1, 2};
  EXPECT_EQ(propose(t, 1, 2, 1), (Tokens{7}));
  EXPECT_EQ(propose(t, 1, 1, 1), (Tokens{9}));
}

TEST(NgramProposer, EarliestOccurrenceWinsAsInVllm) {
  // 1 2 occurs at 0 (then 5) and at 3 (then 6): vLLM takes the earliest.
  const Tokens t = {1, 2, 5, 1, 2, 6, 1, 2};
  EXPECT_EQ(propose(t, 2, 2, 3), (Tokens{5, 1, 2}));
}

TEST(NgramProposer, OccurrenceMayOverlapTheSuffix) {
  EXPECT_EQ(propose({1, 1, 1, 1}, 3, 3, 4), (Tokens{1}));
  EXPECT_EQ(propose({1, 1, 1, 1}, 1, 3, 4), (Tokens{1}));  // n = 3 at 0
  EXPECT_EQ(propose({1, 1, 1, 1}, 1, 1, 4), (Tokens{1, 1, 1}));
}

TEST(NgramProposer, MatchAcrossPromptAndOutput) {
  Tokens out;
  // The earlier occurrence (1 2) straddles the boundary: prompt {7, 1}, output {2, 5, 3, 1, 2}.
  const Tokens p1 = {7, 1}, o1 = {2, 5, 3, 1, 2};
  EXPECT_EQ(propose_ngram(p1, o1, 2, 2, 3, out), 3);
  EXPECT_EQ(out, (Tokens{5, 3, 1}));
  // The suffix straddles it: prompt {1, 2, 9, 1}, output {2}.
  const Tokens p2 = {1, 2, 9, 1}, o2 = {2};
  EXPECT_EQ(propose_ngram(p2, o2, 2, 2, 3, out), 3);
  EXPECT_EQ(out, (Tokens{9, 1, 2}));
  // All in the output, and all in the prompt.
  const Tokens t = {4, 8, 6, 4, 8};
  EXPECT_EQ(propose_ngram({}, t, 1, 2, 2, out), 2);
  EXPECT_EQ(out, (Tokens{6, 4}));
  EXPECT_EQ(propose_ngram(t, {}, 1, 2, 2, out), 2);
  EXPECT_EQ(out, (Tokens{6, 4}));
}

TEST(NgramProposer, MatchNearTheEndGivesFewerThanK) {
  EXPECT_EQ(propose({4, 1, 1}, 1, 1, 4), (Tokens{1}));
  EXPECT_EQ(propose({1, 2, 3, 1, 2}, 2, 2, 5), (Tokens{3, 1, 2}));
}

TEST(NgramProposer, NoMatchReturnsZeroAndClearsOut) {
  Tokens out = {42, 43};
  const Tokens t = {1, 2, 3, 4};
  EXPECT_EQ(propose_ngram(t, {}, 1, 3, 4, out), 0);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(propose_ngram({}, {}, 1, 3, 4, out), 0);
  // Below min_n nothing counts, though a shorter n-gram matches.
  EXPECT_EQ(propose({1, 2, 5, 1, 2}, 3, 4, 2), Tokens{});
}

TEST(NgramProposer, KOne) { EXPECT_EQ(propose({1, 2, 3, 4, 9, 9, 1, 2, 3}, 1, 3, 1), (Tokens{4})); }

TEST(NgramProposer, MinNAboveLengthReturnsZero) {
  EXPECT_EQ(propose({1, 1}, 3, 4, 2), Tokens{});
  EXPECT_EQ(propose({1, 1, 1}, 3, 3, 2), Tokens{});  // the suffix itself never matches
}

TEST(NgramProposer, NonPositiveKProposesNothing) {
  EXPECT_EQ(propose({1, 2, 1}, 1, 1, 0), Tokens{});
  EXPECT_EQ(propose({1, 2, 1}, 1, 1, -3), Tokens{});
}

TEST(NgramProposer, BadWindowThrows) {
  Tokens out;
  const Tokens t = {1, 2, 1};
  EXPECT_THROW(propose_ngram(t, {}, 0, 2, 1, out), halo::Error);
  EXPECT_THROW(propose_ngram(t, {}, 3, 2, 1, out), halo::Error);
}

TEST(NgramProposer, NoAllocationOnceOutHasCapacity) {
  Tokens t(8192);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(i % 7);
  Tokens out;
  out.reserve(8);
  const int32_t* data = out.data();
  for (int k = 1; k <= 8; ++k) {
    EXPECT_EQ(propose_ngram(t, {}, 1, 5, k, out), k);
    EXPECT_EQ(out.data(), data);
  }
}

TEST(NgramProposer, MatchesNaiveReferenceOnRandomSequences) {
  std::mt19937 rng(20240611);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Tokens out;
  for (int iter = 0; iter < 200; ++iter) {
    Tokens t(pick(0, 16));
    for (auto& x : t) x = pick(0, 2);
    const size_t split = static_cast<size_t>(pick(0, static_cast<int>(t.size())));
    const Tokens prompt(t.begin(), t.begin() + split), output(t.begin() + split, t.end());
    for (int min_n = 1; min_n <= 4; ++min_n) {
      for (int max_n = min_n; max_n <= 6; ++max_n) {
        const int k = pick(1, 6);
        int n = propose_ngram(prompt, output, min_n, max_n, k, out);
        EXPECT_EQ(out, naive(t, min_n, max_n, k))
            << "iter " << iter << " min_n " << min_n << " max_n " << max_n << " k " << k;
        EXPECT_EQ(n, static_cast<int>(out.size()));
      }
    }
  }
}
