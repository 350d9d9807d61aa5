#pragma once
// One request inside the engine: its tokens, how many of them have KV in the
// cache, its block table and its own random generator.
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/guide_cursor.h"
#include "engine/sampling_params.h"

namespace halo::engine {

// A token's log-probability and, when asked for, the most likely alternatives.
struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
};

struct BeamGroup;  // beam_search.h

enum class SequenceStatus { kWaiting, kRunning, kFinished };
enum class FinishReason { kNone, kStop, kLength, kAbort };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "abort"

struct Sequence {
  std::string request_id;
  uint64_t arrival = 0;  // admission order (FCFS)
  int priority = 0;      // lower runs first; ties by arrival
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> output_ids;
  std::vector<TokenLogprob> output_logprobs;  // one per output token
  std::vector<TokenLogprob> prompt_logprobs;  // prompt tokens 1..n-1, when asked for
  SamplingParams params;
  std::mt19937_64 rng;

  SequenceStatus status = SequenceStatus::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;
  int32_t stop_token = -1;  // the stop/eos id that ended it, if any
  int num_computed_tokens = 0;  // tokens whose K/V are in the cache
  int num_preemptions = 0;
  std::chrono::steady_clock::time_point first_scheduled{};  // zero until first scheduled
  std::vector<int32_t> block_table;
  std::vector<uint64_t> block_hashes;  // prefix-cache hash chain of the full blocks registered so far
  int64_t lora_id = 0;                 // its LoRA adapter (LoraRequest::id); 0: the base model
  uint64_t hash_root = 0;  // its first block's parent; 0: the engine's (a LoRA adapter has its own)
  std::shared_ptr<BeamGroup> beam;     // set: one beam of a beam search (the scheduler drives it)
  GuideCursor guide;                   // params.guide's cursor after the output so far
  // Speculative decoding: tokens proposed to follow the output, verified by
  // the next step (not part of the sequence until accepted).
  std::vector<int32_t> spec_ids;
  // Pooling requests (params.pooling): what the computed prompt positions
  // gave so far, and the embedding once the prompt is computed.
  PoolState pool;
  std::vector<float> embedding;

  int num_tokens() const { return static_cast<int>(prompt_ids.size() + output_ids.size()); }
  int32_t token_at(int i) const {
    int np = static_cast<int>(prompt_ids.size());
    return i < np ? prompt_ids[i] : output_ids[i - np];
  }
  // A token of the next step's input: the sequence's own, or a proposed one past its end.
  int32_t input_token_at(int i) const { return i < num_tokens() ? token_at(i) : spec_ids[i - num_tokens()]; }
  bool finished() const { return status == SequenceStatus::kFinished; }
};

}  // namespace halo::engine
