#pragma once
// Pooling requests (embeddings, vLLM's `--task embed`): no token is
// generated; the final hidden states of the prompt (the rows lm_head takes,
// after the model's last norm) are pooled into one vector.
//
// The engine gets those rows through ABI v1.5's hidden states. Last-token
// pooling needs the last prompt position only; mean and CLS need every
// position (CLS the first), so such requests ask for a row at each prompt
// position and skip the prefix cache, as prompt logprobs do.
//
// Values only, no threads: a PoolState belongs to its Sequence.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace halo::engine {

enum class PoolingType { kNone, kLast, kMean, kCls };

// "LAST", "MEAN", "CLS" (vLLM's names; any case). Throws halo::Error naming
// the accepted values.
PoolingType parse_pooling_type(std::string_view name);
const char* pooling_type_name(PoolingType type);  // "LAST", "MEAN", "CLS", "NONE"

struct PoolingParams {
  PoolingType type = PoolingType::kNone;
  bool normalize = true;  // L2-normalise the pooled vector
  int dimensions = 0;     // > 0: keep the first `dimensions` values (before normalising)
  bool active() const { return type != PoolingType::kNone; }
  // Mean and CLS read rows before the last prompt position.
  bool every_position() const { return type == PoolingType::kMean || type == PoolingType::kCls; }
};

// What a sequence has pooled so far: prompt positions [0, positions) taken in.
struct PoolState {
  int positions = 0;
  std::vector<double> acc;  // mean: sum of the rows; CLS: row 0; last: empty
};

// Takes in `count` consecutive rows of `width` floats, for prompt positions
// [first_position, first_position + count). Positions taken in before (a
// prompt recomputed after preemption) are skipped; a gap throws.
void pool_rows(const PoolingParams& p, PoolState& s, int first_position, int count, int width,
               const float* rows);

// The embedding of a prompt of `num_positions` tokens once every position is
// taken in; `last` is the row of the last position.
std::vector<float> finish_pooling(const PoolingParams& p, const PoolState& s, int num_positions,
                                  const float* last, int width);

}  // namespace halo::engine
