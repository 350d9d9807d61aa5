#include "text/detokenizer/stop_checker.h"

#include <algorithm>

namespace halo::text {

StopChecker::StopChecker(std::vector<std::string> stop_strings, bool include_stop_str_in_output)
    : stops_(std::move(stop_strings)), include_(include_stop_str_in_output) {}

const std::string& StopChecker::stop_string() const {
  static const std::string kNone;
  return stop_index_ ? stops_[*stop_index_] : kNone;
}

std::string StopChecker::feed(std::string_view delta) {
  if (stopped()) return {};
  held_.append(delta);
  // Earliest-completing stop string in the held text (every stop string that
  // can still match starts inside it: released text never ends with a prefix
  // of a stop string).
  std::size_t best_end = std::string::npos, best_pos = 0, best = 0;
  for (std::size_t i = 0; i < stops_.size(); ++i) {
    const std::string& s = stops_[i];
    if (s.empty()) continue;
    const std::size_t pos = held_.find(s);
    if (pos == std::string::npos) continue;
    const std::size_t end = pos + s.size();
    if (end < best_end || (end == best_end && pos < best_pos)) {
      best_end = end;
      best_pos = pos;
      best = i;
    }
  }
  if (best_end != std::string::npos) {
    stop_index_ = best;
    std::string out = held_.substr(0, include_ ? best_end : best_pos);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of a stop string.
  std::size_t hold = 0;
  for (const std::string& s : stops_) {
    for (std::size_t k = std::min(s.size() - (s.empty() ? 0 : 1), held_.size()); k > hold; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopChecker::finish() {
  if (stopped()) return {};
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace halo::text
