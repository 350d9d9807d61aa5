#include "engine/beam_search.h"

#include <algorithm>
#include <cmath>

namespace halo::engine {

std::optional<EarlyStopping> parse_early_stopping(const std::string& s) {
  if (s == "true" || s == "True" || s == "1") return EarlyStopping::kTrue;
  if (s == "false" || s == "False" || s == "0") return EarlyStopping::kFalse;
  if (s == "never") return EarlyStopping::kNever;
  return std::nullopt;
}

const char* early_stopping_name(EarlyStopping e) {
  switch (e) {
    case EarlyStopping::kTrue:
      return "true";
    case EarlyStopping::kNever:
      return "never";
    case EarlyStopping::kFalse:
      break;
  }
  return "false";
}

BeamSearch::BeamSearch(const BeamParams& params, int prompt_len, int max_tokens,
                       std::vector<int32_t> stop_ids)
    : params_(params),
      prompt_len_(prompt_len),
      max_tokens_(max_tokens),
      stop_ids_(std::move(stop_ids)) {
  live_.push_back({});
}

double BeamSearch::score(double cum, int generated) const {
  return cum / std::pow(static_cast<double>(prompt_len_ + generated),
                        static_cast<double>(params_.length_penalty));
}

void BeamSearch::add_finished(BeamHypothesis h) {
  finished_.push_back(std::move(h));
  if (static_cast<int>(finished_.size()) <= params_.width) return;
  // Drop the worst; on a tie the newer one.
  size_t worst = 0;
  for (size_t i = 1; i < finished_.size(); ++i)
    if (finished_[i].score <= finished_[worst].score) worst = i;
  finished_.erase(finished_.begin() + static_cast<std::ptrdiff_t>(worst));
}

bool BeamSearch::is_done() const {
  if (static_cast<int>(finished_.size()) < params_.width) return false;
  if (params_.early_stopping == EarlyStopping::kTrue) return true;
  double best_cum = live_.front().cum;
  for (const Beam& b : live_) best_cum = std::max(best_cum, b.cum);
  const int generated = static_cast<int>(live_.front().tokens.size());
  const bool to_max = params_.early_stopping == EarlyStopping::kNever && params_.length_penalty > 0;
  const double bound = score(best_cum, to_max ? max_tokens_ : generated);
  double worst = finished_.front().score;
  for (const auto& h : finished_) worst = std::min(worst, h.score);
  return worst >= bound;
}

std::vector<int> BeamSearch::step(const std::vector<Candidates>& offers) {
  if (done_) return {};
  const int W = params_.width;
  struct Cand {
    double score;
    int beam;
    int32_t token;
  };
  std::vector<Cand> cands;
  for (size_t i = 0; i < live_.size() && i < offers.size(); ++i) {
    const size_t k = std::min(offers[i].size(), static_cast<size_t>(2 * W));
    for (size_t j = 0; j < k; ++j)
      cands.push_back(
          {live_[i].cum + offers[i][j].second, static_cast<int>(i), offers[i][j].first});
  }
  std::sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.beam != b.beam) return a.beam < b.beam;
    return a.token < b.token;
  });
  std::vector<Beam> next;
  std::vector<int> parents;
  int rank = 0;
  for (const Cand& c : cands) {
    if (static_cast<int>(next.size()) == W) break;
    const Beam& parent = live_[static_cast<size_t>(c.beam)];
    std::vector<int32_t> tokens = parent.tokens;
    tokens.push_back(c.token);
    if (std::find(stop_ids_.begin(), stop_ids_.end(), c.token) != stop_ids_.end()) {
      if (rank < W) {
        const int generated = static_cast<int>(tokens.size()) - 1;  // the stop id does not count
        add_finished(
            {std::move(tokens), c.score, score(c.score, generated), FinishReason::kStop, c.token});
      }
    } else {
      next.push_back({std::move(tokens), c.score});
      parents.push_back(c.beam);
    }
    ++rank;
  }
  live_ = std::move(next);
  if (live_.empty()) {
    done_ = true;
    return {};
  }
  if (static_cast<int>(live_.front().tokens.size()) >= max_tokens_) {
    finish_live();
    return {};
  }
  if (is_done()) {
    live_.clear();
    done_ = true;
    return {};
  }
  return parents;
}

void BeamSearch::finish_live() {
  for (Beam& b : live_) {
    const int generated = static_cast<int>(b.tokens.size());
    add_finished({std::move(b.tokens), b.cum, score(b.cum, generated), FinishReason::kLength, -1});
  }
  live_.clear();
  done_ = true;
}

std::vector<BeamHypothesis> BeamSearch::results() const {
  std::vector<BeamHypothesis> out = finished_;
  std::stable_sort(out.begin(), out.end(), [](const BeamHypothesis& a, const BeamHypothesis& b) {
    return a.score > b.score;
  });
  return out;
}

}  // namespace halo::engine
