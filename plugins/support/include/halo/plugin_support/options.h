// The option list of device_open, prepare and compile, read by key. Every
// in-tree plugin parses its options through this reader so that all of them
// refuse a key they do not take (ABI v1.3: a misspelt option is an error, not
// a silent default) with the same message:
//   prepare: unknown option 'foo' (known: threads, kernels, matmul, dtype)
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "halo/device_abi.h"

namespace halo::plugin {

class OptionReader {
 public:
  // Checks the array (NULL with n > 0, a NULL key) and copies it; `where`
  // ("device_open", "prepare", "compile") prefixes every message.
  OptionReader(const char* where, const halo_option* options, size_t n);

  // The value of `key` (the last one when given twice), nullopt when absent;
  // either way `key` becomes known.
  std::optional<std::string_view> get(std::string_view key);
  std::string_view str(std::string_view key, std::string_view fallback);
  // An integer in [lo, hi] (an empty value is refused, not taken as absent).
  int64_t integer(std::string_view key, int64_t fallback, int64_t lo, int64_t hi);
  // One of `allowed`, else INVALID_ARGUMENT listing them.
  std::string_view choice(std::string_view key, std::string_view fallback,
                          std::initializer_list<std::string_view> allowed);

  // Keys the plugin takes at another call: the core hands one list to both
  // device_open and prepare, so each accepts the other's keys unread.
  void also_known(std::span<const std::string_view> keys);
  void also_known(std::initializer_list<std::string_view> keys) { also_known({keys.begin(), keys.size()}); }

  // Throws INVALID_ARGUMENT naming every given key that is not known.
  void refuse_unknown() const;

 private:
  void know(std::string_view key);
  std::string where_;
  std::vector<std::pair<std::string, std::string>> given_;
  std::vector<std::string> known_;  // in the order first read or declared
};

}  // namespace halo::plugin
