#pragma once
// Verification of proposed tokens against the target model's distributions
// (speculative decoding). Greedy: a proposal is accepted when it is the
// target's argmax, so the output is the one decoding without proposals would
// give. Sampling: rejection sampling (Leviathan et al. 2023; Chen et al.
// 2023): proposal d drawn from q is accepted with probability
// min(1, p(d) / q(d)); at the first rejection a token is drawn from
// normalize(max(0, p - q)), and when all are accepted one more from the
// target's next distribution, so every emitted token is distributed exactly
// as the target's own sample. Pure: no engine state; all randomness comes
// from the sequence's generator, in a fixed order.
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "engine/sampler.h"

namespace halo::engine::spec {

enum class AcceptRule {
  kLossless,
  kAlwaysAccept,  // wrong on purpose: tests show their statistics can fail
};

// The target's processed distribution at verify row j, which predicts the
// token after proposal j - 1 (row 0: after the sequence's last token), given
// proposals [0, j) accepted. Called for j = 0, 1, ... in order, each at most
// once; the returned reference may be invalidated by the next call.
using RowDist = std::function<const TokenDist&(int j)>;

// Appends to `out` the accepted proposals and then one token of the target's
// (the correction at the first rejection, or the bonus after the last
// proposal). `q` holds the proposer's distribution per proposal; empty means
// each proposal was certain (prompt lookup: q is one-hot). Returns the number
// of proposals accepted.
int verify_proposals(std::span<const int32_t> proposals, std::span<const TokenDist> q,
                     const RowDist& dist_of, std::mt19937_64& rng, std::vector<int32_t>& out,
                     AcceptRule rule = AcceptRule::kLossless);

}  // namespace halo::engine::spec
