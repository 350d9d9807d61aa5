#pragma once
// A compiled PCRE2 (UTF + UCP, JIT when available) pattern (internal).
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace halo::text {

class Regex {
 public:
  // `pattern` is in Hugging Face / Oniguruma syntax; it is translated to PCRE2.
  // `what` names the pattern's origin for error messages.
  Regex(std::string_view pattern, const std::string& what);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // All non-overlapping matches (byte ranges) in `text`, left to right.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;

  // Translates Oniguruma-only syntax (\s, \S as Unicode White_Space) to PCRE2.
  static std::string translate(std::string_view onig_pattern);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace halo::text
