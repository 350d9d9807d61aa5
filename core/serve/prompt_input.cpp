#include "serve/prompt_input.h"

#include <fmt/format.h>

#include <string>

#include "serve/api_error.h"

namespace halo::serve {

std::vector<int32_t> parse_token_ids(const json& arr, const char* param, int vocab) {
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (const auto& x : arr) {
    if (!x.is_number_integer())
      throw ApiError(400, fmt::format("'{}' token ids must be integers", param), param,
                     error_code::kInvalidType);
    // Compared as sent (x.dump()): an id past int64 must not wrap into the vocabulary.
    if (x.is_number_unsigned() ? x.get<uint64_t>() >= uint64_t(vocab)
                               : (x.get<int64_t>() < 0 || x.get<int64_t>() >= vocab))
      throw ApiError(400,
                     fmt::format("token id {} in '{}' is outside the vocabulary [0, {})", x.dump(),
                                 param, vocab),
                     param, error_code::kInvalidValue);
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return ids;
}

std::vector<Prompt> parse_prompts(const json& value, const char* param, int vocab) {
  const std::string shape = fmt::format(
      "'{}' must be a string, a list of strings, a list of token ids or a list of token-id lists",
      param);
  std::vector<Prompt> prompts;
  if (value.is_string()) {
    prompts.push_back({value.get<std::string>(), true, {}});
  } else if (value.is_array()) {
    if (value.empty())
      throw ApiError(400, fmt::format("'{}' must not be an empty list", param), param);
    const json& first = value[0];
    if (first.is_string()) {
      for (const auto& x : value) {
        if (!x.is_string()) throw ApiError(400, shape, param, error_code::kInvalidType);
        prompts.push_back({x.get<std::string>(), true, {}});
      }
    } else if (first.is_number_integer()) {
      prompts.push_back({"", false, parse_token_ids(value, param, vocab)});
    } else if (first.is_array()) {
      for (const auto& x : value) {
        if (!x.is_array() || x.empty()) throw ApiError(400, shape, param, error_code::kInvalidType);
        prompts.push_back({"", false, parse_token_ids(x, param, vocab)});
      }
    } else {
      throw ApiError(400, shape, param, error_code::kInvalidType);
    }
  } else {
    throw ApiError(400, shape, param, error_code::kInvalidType);
  }
  if (prompts.size() > 1024)
    throw ApiError(400, fmt::format("'{}' holds more than 1024 prompts", param), param,
                   error_code::kInvalidValue);
  return prompts;
}

void truncate_prompt(std::vector<int32_t>& ids, std::optional<int> k, int max_model_len) {
  if (!k) return;
  int keep = *k < 0 ? max_model_len : *k;
  if (keep > max_model_len)
    throw ApiError(400,
                   fmt::format("'truncate_prompt_tokens' ({}) must not exceed the maximum context length ({})",
                               keep, max_model_len),
                   "truncate_prompt_tokens", error_code::kInvalidValue);
  if (static_cast<int>(ids.size()) > keep) ids.erase(ids.begin(), ids.end() - keep);
}

}  // namespace halo::serve
