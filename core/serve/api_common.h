#pragma once
// Shared pieces of the OpenAI-compatible API: the error type every handler
// throws, typed access to request fields, and the mapping of the sampling
// fields (OpenAI's and vLLM's) onto the engine's RequestOptions.
#include <cstdint>
#include <exception>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "engine/async_engine.h"
#include "model/hf_config.h"
#include "serve/http_server.h"

namespace halo::serve {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// An error with its HTTP status, in OpenAI's shape:
// {"error": {"message", "type", "param", "code"}}. `code` is OpenAI's
// machine-readable string (model_not_found, context_length_exceeded, ...):
// the one given here, else default_error_code(status); "" means null.
class ApiError : public Error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::optional<std::string> code = std::nullopt)
      : Error(std::move(message)), status_(status), param_(std::move(param)), code_(std::move(code)) {}
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
inline constexpr const char* kInvalidType = "invalid_type";              // a field of the wrong type
inline constexpr const char* kInvalidValue = "invalid_value";            // out of range, outside the vocabulary
inline constexpr const char* kMissingParameter = "missing_required_parameter";
inline constexpr const char* kUnsupportedParameter = "unsupported_parameter";  // a field halo cannot honour
inline constexpr const char* kUnsupportedValue = "unsupported_value";          // a value halo cannot honour
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
// A frontend's error shape (OpenAI's, Triton's, LMI's) for an ApiError.
using ErrorFormat = HttpResponse (*)(const ApiError&);
// to_api_error in `format`, with the error's headers (Retry-After, ...).
HttpResponse error_http_response(const std::exception_ptr& e, ErrorFormat format);

// Limits on what one request may make the server do (docs/serving.md, "Limits").
struct RequestLimits {
  // Nesting depth of request JSON (objects + arrays). Rendering a chat
  // recurses through the JSON, so a deep document would exhaust the stack.
  int max_json_depth = 128;
  // Bytes of a text prompt (or rendered chat) before it is tokenized; 0:
  // kPromptBytesPerToken per token of the model's context.
  int64_t max_prompt_bytes = 0;
  // A request's own `chat_template` is code the server runs: refused unless set.
  bool trust_request_chat_template = false;
};
// A token of a real prompt is a few bytes; 64 leaves room for long tokens
// (runs of spaces, code) while keeping tokenization of one request bounded.
inline constexpr int64_t kPromptBytesPerToken = 64;

// vLLM's error type names by status ("BadRequestError", "NotFoundError", ...).
const char* error_type(int status);
// {"error": {"message", "type", "param", "code"}} in OpenAI's order.
ojson error_object(const ApiError& e);
ojson error_object(int status, const std::string& message, const std::string& param = {});  // the default code
std::string dump(const ojson& j);  // compact; invalid UTF-8 replaced

// Typed, null-tolerant access to the fields of a JSON request object. A
// field of the wrong type is a 400 naming it. Fields never read are
// "unknown" and are only logged.
class Fields {
 public:
  explicit Fields(const json& object) : j_(object) {}
  const json* get(const std::string& name);  // nullptr when absent or null
  std::optional<bool> boolean(const std::string& name);
  std::optional<int64_t> integer(const std::string& name, int64_t lo, int64_t hi);
  std::optional<double> number(const std::string& name);
  std::optional<std::string> string(const std::string& name);
  void touch(const std::string& name) { used_.insert(name); }
  void log_unknown(const std::string& endpoint) const;

 private:
  const json& j_;
  std::set<std::string> used_;
};

// Where a sampling default comes from when the request does not set it.
struct SamplingDefaults {
  model::GenerationDefaults generation;  // the model's generation_config.json
  int vocab_size = 0;
};

struct SamplingRequest {
  engine::RequestOptions options;
  std::optional<int> max_tokens;  // as requested (max_completion_tokens wins over max_tokens)
  std::optional<int> truncate_prompt_tokens;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage_stats = false;
};

enum class Endpoint { kCompletions, kChat, kGenerate };

// Reads every sampling/stopping field of the contracts doc from `f` onto
// RequestOptions (max_tokens is left for the caller, who knows the prompt).
// Fields that cannot be honoured are rejected with a 400 naming them.
SamplingRequest parse_sampling(Fields& f, Endpoint endpoint, const SamplingDefaults& defaults);

// vLLM's context-length message.
std::string context_length_message(int max_model_len, int prompt_tokens, int max_tokens);

// `text` as JSON no deeper than `max_depth` (400 otherwise, naming `what`
// and, for depth, --max-request-json-depth). Every request JSON is parsed here.
json parse_request_json(const std::string& text, int max_depth, const std::string& what = "the request body");
// The request body as a JSON object (400 otherwise).
json parse_json_object(const std::string& body, int max_depth);

// OpenAI's tools: [{"type": "function", "function": {"name": non-empty string,
// "description"?: string, "parameters"?: object}}]; 400 naming the index and field.
void validate_tools(const json& tools);

// max_tokens from the request, else the endpoint's default (16 for
// completions and /generate; chat: what is left of the context, capped by
// generation_config's max_new_tokens); 400 when it overflows the context.
int resolve_max_tokens(const SamplingRequest& s, Endpoint ep, int prompt_len, int max_model_len,
                       const model::GenerationDefaults& g);

}  // namespace halo::serve
