#pragma once
// Where a sequence stands in its guided-decoding constraint: the guide's
// automaton state and whether a reasoning gate still holds it back. Pure, so
// the scheduler (real tokens), the proposer filter and the verifier (proposed
// tokens) walk it the same way.
#include <cstddef>
#include <cstdint>

#include "engine/sampling_params.h"
#include "text/guided/token_mask.h"

namespace halo::engine {

struct GuideCursor {
  int32_t state = 0;
  bool waiting = false;  // inside params.guide_gate's reasoning: the guide does not hold yet
};

// The cursor after `token`, output token number `index` (0-based). Reasoning
// before a gated guide: a first <think> opens it, </think> ends it; the guide
// then starts from its first state.
inline GuideCursor advance_guide(const SamplingParams& p, GuideCursor c, size_t index,
                                 int32_t token) {
  const ReasoningGate& gate = p.guide_gate;
  if (c.waiting) {
    if (token == gate.end) c.waiting = false;
  } else if (gate.active() && index == 0 && token == gate.start) {
    c.waiting = true;
  } else {
    c.state = p.guide->advance(c.state, token);
  }
  return c;
}

}  // namespace halo::engine
