#pragma once
// Per-request sampling and stopping parameters, named as vLLM names them.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace halo::text::guided {
class Guide;
}

namespace halo::engine {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;
  int top_k = 0;  // 0 or -1 = off
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::optional<uint64_t> seed;  // per-request generator; otherwise the engine's
  int max_tokens = 16;
  int min_tokens = 0;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  int logprobs = -1;         // -1: none; 0: the sampled token's; k: plus the k most likely
  int prompt_logprobs = -1;  // same, for every prompt token after the first
  // Guided decoding: only tokens that keep the output matching this
  // constraint are sampled, and end-of-sequence only where it is complete.
  std::shared_ptr<const text::guided::Guide> guide;

  // Throws halo::Error naming the field and value when out of range.
  void validate() const;
};

}  // namespace halo::engine
