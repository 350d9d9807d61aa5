#pragma once
// Per-request sampling and stopping parameters, named as vLLM names them.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/pooling.h"

namespace halo::text::guided {
class Guide;
}

namespace halo::engine {

struct LoraRequest;  // engine/lora.h

// A reasoning model thinks before its guided answer: the guide holds only
// after `end` (its </think> token) has been generated, as vLLM's
// reasoning-aware structured output does. `open`: the prompt opened the
// reasoning (DeepSeek-R1's template); otherwise a first token `start`
// (<think>, -1: none) opens it, and the guide allows that token there.
struct ReasoningGate {
  int32_t start = -1;
  int32_t end = -1;  // -1: no gate, the guide holds from the first token
  bool open = false;
  bool active() const { return end >= 0; }
};

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
  ReasoningGate guide_gate;  // with `guide`: the reasoning it waits for
  // Set: a pooling request (embeddings, engine/pooling.h). Nothing is
  // sampled; the sequence finishes once its prompt is computed, with
  // Sequence::embedding.
  PoolingParams pooling;
  // Set: the LoRA adapter the request runs with (its host copy lives as long
  // as the request); null: the base model.
  std::shared_ptr<const LoraRequest> lora;

  // Throws halo::Error naming the field and value when out of range.
  void validate() const;
};

}  // namespace halo::engine
