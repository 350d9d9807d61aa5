#pragma once
// Proposers of speculative tokens: before a step, the engine asks one for up
// to max_k tokens to follow each decoding sequence; the step verifies them
// (rejection_sampler.h). Called on the engine's thread only.
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"

namespace halo::engine::spec {

struct ProposeRequest {
  Sequence* seq;  // its spec_ids are empty; the proposer fills at most max_k
  int max_k;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual void propose(std::span<const ProposeRequest> batch) = 0;
  // The distribution each of this step's proposals for `seq` was drawn from;
  // empty when they were certain (q one-hot).
  virtual std::span<const TokenDist> proposal_dists(const Sequence&) const { return {}; }
  // After each target step (a draft model computes the same tokens; the
  // runner holds the step's logits rows and, for a proposer that wants them,
  // its hidden rows) and each block copy the engine issues.
  virtual void after_step(const SchedulerOutput&, const ModelRunner&) {}
  virtual void copy_blocks(const std::vector<int32_t>&, const std::vector<int32_t>&) {}
  // An EAGLE/MTP-style head reads the target's last hidden states (ABI v1.5,
  // HALO_CAP_HIDDEN_STATES): the engine then asks the device for them.
  virtual bool wants_hidden_states() const { return false; }
};

// Prompt lookup over the prompt and the output so far (vLLM's "ngram").
std::unique_ptr<Proposer> make_ngram_proposer(int prompt_lookup_min, int prompt_lookup_max);

// For benchmarks and tests: proposes a request's given continuation (e.g. the
// target's own greedy output) while its output follows it, each token
// replaced by a wrong one with probability `corrupt` (a seeded generator), so
// acceptance can be chosen.
class ReplayProposer : public Proposer {
 public:
  ReplayProposer(int vocab_size, double corrupt, uint64_t seed)
      : vocab_(vocab_size), corrupt_(corrupt), rng_(seed) {}
  void set_script(const std::string& request_id, std::vector<int32_t> continuation) {
    scripts_[request_id] = std::move(continuation);
  }
  void propose(std::span<const ProposeRequest> batch) override;

 private:
  int vocab_;
  double corrupt_;
  std::mt19937_64 rng_;
  std::unordered_map<std::string, std::vector<int32_t>> scripts_;
};

}  // namespace halo::engine::spec
