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

class Sampler {
 public:
  // `logits` is modified in place (used as scratch). `history` holds the
  // prompt and output tokens, `output` only the output (for the penalties).
  SampleResult sample(std::span<float> logits, const SamplingParams& params,
                      std::span<const int32_t> prompt, std::span<const int32_t> output,
                      std::mt19937_64& rng);

 private:
  std::vector<int32_t> order_;   // scratch: candidate ids sorted by logit
  std::vector<float> probs_;     // scratch
  std::vector<int32_t> counts_;  // scratch: output token counts
};

}  // namespace halo::engine
