#include "halo/plugin_support/options.h"

#include <algorithm>
#include <charconv>

#include "halo/plugin_support/errors.h"

namespace halo::plugin {

OptionReader::OptionReader(const char* where, const halo_option* options, size_t n) : where_(where) {
  if (n > 0 && options == nullptr) invalid(where_, ": options=NULL with num_options=", n);
  for (size_t i = 0; i < n; ++i) {
    if (options[i].key == nullptr) invalid(where_, ": options[", i, "].key is NULL");
    given_.emplace_back(options[i].key, options[i].value ? options[i].value : "");
  }
}

void OptionReader::know(std::string_view key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.emplace_back(key);
}

std::optional<std::string_view> OptionReader::get(std::string_view key) {
  know(key);
  // The last occurrence wins: the core appends what the user set last.
  for (auto it = given_.rbegin(); it != given_.rend(); ++it)
    if (it->first == key) return std::string_view(it->second);
  return std::nullopt;
}

std::string_view OptionReader::str(std::string_view key, std::string_view fallback) {
  return get(key).value_or(fallback);
}

int64_t OptionReader::integer(std::string_view key, int64_t fallback, int64_t lo, int64_t hi) {
  const auto v = get(key);
  if (!v) return fallback;
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
  if (ec != std::errc() || end != v->data() + v->size() || n < lo || n > hi)
    invalid(where_, ": option ", key, "=\"", *v, "\" is not an integer in [", lo, ", ", hi, "]");
  return n;
}

std::string_view OptionReader::choice(std::string_view key, std::string_view fallback,
                                      std::initializer_list<std::string_view> allowed) {
  const std::string_view v = str(key, fallback);
  if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return v;
  std::string list;
  for (std::string_view a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
  invalid(where_, ": option ", key, "=\"", v, "\" is not one of ", list);
}

void OptionReader::also_known(std::span<const std::string_view> keys) {
  for (std::string_view k : keys) know(k);
}

void OptionReader::refuse_unknown() const {
  std::vector<std::string> unknown;
  for (const auto& [key, value] : given_)
    if (std::find(known_.begin(), known_.end(), key) == known_.end() &&
        std::find(unknown.begin(), unknown.end(), key) == unknown.end())
      unknown.push_back(key);
  if (unknown.empty()) return;
  std::string names, known;
  for (const auto& k : unknown) names += (names.empty() ? "'" : ", '") + k + "'";
  for (const auto& k : known_) known += (known.empty() ? "" : ", ") + k;
  invalid(where_, ": unknown option", unknown.size() > 1 ? "s " : " ", names, " (known: ",
          known.empty() ? "none" : known, ")");
}

}  // namespace halo::plugin
