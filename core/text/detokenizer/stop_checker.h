#pragma once
// Stop strings over streamed text.
//
// feed() takes text deltas and returns the part that may be streamed now.
// Text that could still be the start of a stop string is held back until it
// is decided. When a stop string completes (it may span any number of
// deltas), the output is cut right before it (or right after it with
// include_stop_str_in_output) and nothing after it is ever released.
//
// With several stop strings the one that completes first wins (ties: the one
// that starts first), so the result does not depend on how the text was split
// into deltas.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace halo::text {

class StopChecker {
 public:
  StopChecker(std::vector<std::string> stop_strings, bool include_stop_str_in_output);

  std::string feed(std::string_view delta);
  // End of generation: releases what was held back (nothing once stopped).
  std::string finish();

  bool stopped() const { return stop_index_.has_value(); }
  // Index into the stop strings given to the constructor of the one that matched.
  std::optional<std::size_t> stop_index() const { return stop_index_; }
  const std::string& stop_string() const;
  std::size_t held_back() const { return held_.size(); }

 private:
  std::vector<std::string> stops_;
  bool include_;
  std::string held_;
  std::optional<std::size_t> stop_index_;
};

}  // namespace halo::text
