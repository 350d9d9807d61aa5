#pragma once
// The serving layer's error type and request limits, with no wire format in
// them: every frontend and the serving core throw ApiError; to_api_error is
// the one mapping of what a request throws to a status.
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/json_depth.h"

namespace halo::serve {

// An error with its HTTP status, in OpenAI's shape:
// {"error": {"message", "type", "param", "code"}}. `code` is OpenAI's
// machine-readable string (model_not_found, context_length_exceeded, ...):
// the one given here, else default_error_code(status); "" means null.
class ApiError : public Error {
 public:
  ApiError(int status, std::string message, std::string param = {},
           std::optional<std::string> code = std::nullopt)
      : Error(std::move(message)),
        status_(status),
        param_(std::move(param)),
        code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  // OpenAI's `code` (nullopt: null).
  std::optional<std::string> code() const;
  std::vector<std::pair<std::string, std::string>> headers;  // e.g. Retry-After

 private:
  int status_;
  std::string param_;
  std::optional<std::string> code_;
};

// OpenAI's error codes halo sends (docs/serving.md, "Errors").
namespace error_code {
inline constexpr const char* kInvalidRequest = "invalid_request_error";  // 400 without a finer code
inline constexpr const char* kInvalidType = "invalid_type";  // a field of the wrong type
inline constexpr const char* kInvalidValue =
    "invalid_value";  // out of range, outside the vocabulary
inline constexpr const char* kMissingParameter = "missing_required_parameter";
inline constexpr const char* kUnsupportedParameter =
    "unsupported_parameter";                                           // a field halo cannot honour
inline constexpr const char* kUnsupportedValue = "unsupported_value";  // a value halo cannot honour
inline constexpr const char* kContextLength = "context_length_exceeded";
inline constexpr const char* kInvalidApiKey = "invalid_api_key";  // 401
inline constexpr const char* kModelNotFound = "model_not_found";  // 404 for a model
inline constexpr const char* kRateLimit = "rate_limit_exceeded";  // 429
}  // namespace error_code

// The code of an error that names none, by status: 400 invalid_request_error,
// 401 invalid_api_key, 429 rate_limit_exceeded; nullptr (null) otherwise, as
// OpenAI sends for an unknown route (404), a server error (500) or 503.
const char* default_error_code(int status);

// The one mapping of what a request handler throws to an HTTP status: an
// ApiError as thrown; a chat-template error, malformed JSON or any other
// halo::Error is the client's (400); anything else is a 500 (and logged).
ApiError to_api_error(const std::exception_ptr& e);

// Limits on what one request may make the server do (docs/serving.md, "Limits").
struct RequestLimits {
  // Nesting depth of request JSON (objects + arrays). Rendering a chat
  // recurses through the JSON, so a deep document would exhaust the stack.
  int max_json_depth = kDefaultMaxJsonDepth;
  // Bytes of a text prompt (or rendered chat) before it is tokenized; 0:
  // kPromptBytesPerToken per token of the model's context.
  int64_t max_prompt_bytes = 0;
  // A request's own `chat_template` is code the server runs: refused unless set.
  bool trust_request_chat_template = false;
};
// A token of a real prompt is a few bytes; 64 leaves room for long tokens
// (runs of spaces, code) while keeping tokenization of one request bounded.
inline constexpr int64_t kPromptBytesPerToken = 64;

}  // namespace halo::serve
