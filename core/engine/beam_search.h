#pragma once
// Beam search as an algorithm over next-token log-probabilities, with no
// sequences or blocks in it (the scheduler maps beams onto sequences that
// share KV blocks; see Scheduler). Hugging Face's and vLLM's rules:
//
//   - every step each live beam offers its 2W most likely next tokens
//     (ties: lower id), scored cum + logprob; all offers are ranked together
//     (ties: lower beam index, then lower id) and walked in order: a stop
//     token ranked below W ends a hypothesis (kept in its tokens and cum),
//     any other token extends a new live beam, until W new beams exist;
//   - a finished hypothesis scores cum / L^length_penalty, L = prompt length
//     + its tokens without a final stop token; at most W are kept (the worst
//     dropped, the newer on a tie);
//   - when the beams reach max_tokens they all become hypotheses (length);
//   - with W hypotheses: early_stopping true ends at once; false ends when
//     the worst kept score >= best live cum / Lcur^length_penalty; "never"
//     uses Lmax = prompt + max_tokens there when length_penalty > 0.
//
// The result is the hypotheses best first (ties: the earlier finished).
// Single-threaded; owned by one request.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/sequence.h"

namespace halo::engine {

enum class EarlyStopping { kFalse, kTrue, kNever };

struct BeamParams {
  int width = 0;  // W; 0 = no beam search
  float length_penalty = 1.0f;
  EarlyStopping early_stopping = EarlyStopping::kFalse;
};

// "true", "false" or "never" (and JSON-ish spellings); nullopt otherwise.
std::optional<EarlyStopping> parse_early_stopping(const std::string& s);
const char* early_stopping_name(EarlyStopping e);

struct BeamHypothesis {
  std::vector<int32_t> tokens;
  double cumulative_logprob = 0;
  double score = 0;
  FinishReason finish_reason = FinishReason::kLength;
  int32_t stop_token = -1;  // the stop id that ended it (-1: none)
};

class BeamSearch {
 public:
  struct Beam {
    std::vector<int32_t> tokens;
    double cum = 0;
  };
  // One offered token of a live beam: (id, logprob), most likely first.
  using Candidates = std::vector<std::pair<int32_t, float>>;

  BeamSearch(const BeamParams& params, int prompt_len, int max_tokens,
             std::vector<int32_t> stop_ids);

  const std::vector<Beam>& live() const { return live_; }
  int width() const { return params_.width; }
  bool done() const { return done_; }

  // One step: offers[i] are live beam i's candidates (at least 2W, or the
  // whole vocabulary). Returns, for each new live beam (best first), the index
  // of its parent among the previous live beams; empty once done().
  std::vector<int> step(const std::vector<Candidates>& offers);

  // The finished hypotheses, best first (at most W; the live beams count as
  // finished by length when the search was cut short, e.g. by max_model_len).
  std::vector<BeamHypothesis> results() const;
  // Ends the search now: every live beam becomes a hypothesis (length).
  void finish_live();

 private:
  double score(double cum, int generated) const;
  void add_finished(BeamHypothesis h);
  bool is_done() const;

  BeamParams params_;
  int prompt_len_;
  int max_tokens_;
  std::vector<int32_t> stop_ids_;
  std::vector<Beam> live_;
  std::vector<BeamHypothesis> finished_;  // in finishing order
  bool done_ = false;
};

// A beam search request inside the scheduler: each live beam is a sequence
// (in search.live() order); a beam chosen twice is forked, sharing its KV
// blocks copy-on-write (KvBlockManager::fork). Owned by its sequences, which
// the scheduler's queues own (so the group holds them weakly).
struct BeamGroup {
  BeamGroup(BeamSearch s, std::string id) : search(std::move(s)), request_id(std::move(id)) {}
  BeamSearch search;
  std::string request_id;
  std::vector<std::weak_ptr<Sequence>> beams;
  std::vector<std::optional<TokenLogprob>> offers;  // each beam's step result, until all have one
  bool reported = false;                            // the engine has returned the result
};

}  // namespace halo::engine
