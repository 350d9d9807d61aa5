#pragma once
// Turns one row of logits into a token, vLLM's order: penalties, temperature,
// top-k, top-p, min-p, then a draw from the request's own generator. The same
// seed and logits always give the same token.
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "engine/sampling_params.h"
#include "engine/sequence.h"

namespace halo::engine {

struct SampleResult {
  TokenLogprob sampled;  // the token, its log-probability under the raw model
                         // distribution, and the params.logprobs most likely
};

// Log-probability of `token` under softmax(logits) and the top_k most likely
// tokens with theirs (ties: lower id first).
TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int top_k);

// The distribution a token is drawn from once penalties, temperature, top-k,
// min-p and top-p are applied: the kept candidates, most likely first, with
// unnormalized weights. Greedy decoding keeps one candidate and draws nothing.
struct TokenDist {
  std::vector<int32_t> ids;
  std::vector<float> weights;
  double total = 0.0;  // sum of weights
  bool greedy = false;
  // Normalized probability of `token` (0 when it was cut).
  double prob(int32_t token) const;
};

class Sampler {
 public:
  // `logits` is modified in place (used as scratch). `prompt` and `output`
  // are the sequence's tokens (for the penalties).
  SampleResult sample(std::span<float> logits, const SamplingParams& params,
                      std::span<const int32_t> prompt, std::span<const int32_t> output,
                      std::mt19937_64& rng);
  // The processing half of sample(): the distribution of the next token. The
  // reference stays valid until the next call.
  const TokenDist& distribution(std::span<float> logits, const SamplingParams& params,
                                std::span<const int32_t> prompt, std::span<const int32_t> output);
  // The drawing half: one uniform from `rng` unless greedy (sample() draws
  // exactly this way, so a seed gives the same tokens through either path).
  static int32_t draw(const TokenDist& dist, std::mt19937_64& rng);

 private:
  void penalize(std::span<float> logits, const SamplingParams& p, std::span<const int32_t> prompt,
                std::span<const int32_t> output);
  void select_candidates(std::span<const float> logits, const SamplingParams& p);
  void cut_top_p(float top_p, std::vector<float>& w);
  // Higher logit first, lower id first among equals: one total order, so any
  // sorted prefix is the prefix of the full sort.
  static auto by_logit(std::span<const float> logits) {
    return [logits](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
  }
  std::vector<int32_t> order_;   // scratch: candidate ids, the most likely first
  std::vector<int32_t> counts_;  // scratch: output token counts
  std::vector<float> raw_;       // scratch: logits before processing
  TokenDist dist_;
};

}  // namespace halo::engine
