#include "engine/spec_decode/rejection_sampler.h"

#include <algorithm>

namespace halo::engine::spec {

namespace {

// q(token), normalized; q empty: one-hot on `proposal`.
double proposal_prob(std::span<const TokenDist> q, size_t j, int32_t proposal, int32_t token) {
  return q.empty() ? (token == proposal ? 1.0 : 0.0) : q[j].prob(token);
}

// normalize(max(0, p - q)): the target's mass the proposer under-covers.
// Falls back to p itself when nothing is left (q covers p, up to rounding).
// A draft's q is first spread over a table by token id, so the residual
// costs |p| + |q| rather than |p| x |q| (both are the whole vocabulary
// without top-k).
int32_t draw_residual(const TokenDist& p, std::span<const TokenDist> q, size_t j, int32_t proposal,
                      std::mt19937_64& rng) {
  thread_local std::vector<double> q_of;  // q_of[token]
  q_of.clear();
  if (q.empty()) {
    q_of.resize(static_cast<size_t>(proposal) + 1, 0.0);
    q_of[static_cast<size_t>(proposal)] = 1.0;
  } else {
    const TokenDist& d = q[j];
    for (size_t i = 0; i < d.ids.size(); ++i) {
      const auto t = static_cast<size_t>(d.ids[i]);
      if (t >= q_of.size()) q_of.resize(t + 1, 0.0);
      q_of[t] = d.weights[i] / d.total;  // ids are distinct: what TokenDist::prob gives
    }
  }
  TokenDist r;
  r.ids.reserve(p.ids.size());
  r.weights.reserve(p.ids.size());
  for (size_t i = 0; i < p.ids.size(); ++i) {
    const auto t = static_cast<size_t>(p.ids[i]);
    const double w = p.weights[i] / p.total - (t < q_of.size() ? q_of[t] : 0.0);
    if (w <= 0.0) continue;
    r.ids.push_back(p.ids[i]);
    r.weights.push_back(static_cast<float>(w));
    r.total += static_cast<float>(w);
  }
  return Sampler::draw(r.ids.empty() ? p : r, rng);
}

}  // namespace

int verify_proposals(std::span<const int32_t> proposals, std::span<const TokenDist> q,
                     const RowDist& dist_of, std::mt19937_64& rng, std::vector<int32_t>& out,
                     AcceptRule rule) {
  for (size_t j = 0; j < proposals.size(); ++j) {
    const int32_t d = proposals[j];
    const TokenDist& p = dist_of(static_cast<int>(j));
    bool accept = false;
    if (rule == AcceptRule::kAlwaysAccept) {
      accept = true;
    } else if (p.greedy) {
      accept = p.ids.front() == d;
    } else {
      const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
      accept = u * proposal_prob(q, j, d, d) < p.prob(d);
    }
    if (accept) {
      out.push_back(d);
      continue;
    }
    out.push_back(p.greedy ? p.ids.front() : draw_residual(p, q, j, d, rng));
    return static_cast<int>(j);
  }
  out.push_back(Sampler::draw(dist_of(static_cast<int>(proposals.size())), rng));
  return static_cast<int>(proposals.size());
}

}  // namespace halo::engine::spec
