#pragma once
// One request inside the engine: its tokens, how many of them have KV in the
// cache, its block table and its own random generator.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/sampling_params.h"

namespace halo::engine {

enum class SequenceStatus { kWaiting, kRunning, kFinished };
enum class FinishReason { kNone, kStop, kLength, kAbort };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "abort"

struct Sequence {
  std::string request_id;
  uint64_t arrival = 0;  // admission order (FCFS)
  int priority = 0;      // lower runs first; ties by arrival
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> output_ids;
  std::vector<float> output_logprobs;
  SamplingParams params;
  std::mt19937_64 rng;

  SequenceStatus status = SequenceStatus::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;
  int32_t stop_token = -1;  // the stop/eos id that ended it, if any
  int num_computed_tokens = 0;  // tokens whose K/V are in the cache
  int num_preemptions = 0;
  std::vector<int32_t> block_table;
  std::vector<uint64_t> block_hashes;  // prefix-cache hash chain of the full blocks registered so far

  int num_tokens() const { return static_cast<int>(prompt_ids.size() + output_ids.size()); }
  int32_t token_at(int i) const {
    int np = static_cast<int>(prompt_ids.size());
    return i < np ? prompt_ids[i] : output_ids[i - np];
  }
  bool finished() const { return status == SequenceStatus::kFinished; }
};

}  // namespace halo::engine
