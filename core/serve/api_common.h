#pragma once
// Shared pieces of the HTTP frontends: errors in OpenAI's shape, typed
// access to request fields, and the mapping of the sampling fields (OpenAI's
// and vLLM's) onto the engine's RequestOptions.
#include <cstdint>
#include <exception>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "engine/async_engine.h"
#include "model/hf_config.h"
#include "serve/api_error.h"
#include "serve/http_server.h"

namespace halo::serve {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// A frontend's error shape (OpenAI's, Triton's, LMI's) for an ApiError.
using ErrorFormat = HttpResponse (*)(const ApiError&);
// to_api_error in `format`, with the error's headers (Retry-After, ...).
HttpResponse error_http_response(const std::exception_ptr& e, ErrorFormat format);

// The response pieces every frontend writes the same way.
// vLLM's finish_reason: "stop", "length", "abort", or nullptr (not finished).
const char* finish_name(engine::FinishReason r);
// One token's text as logprobs show it ("token_id:<id>" if it cannot be decoded).
std::string token_text(const text::Tokenizer& tok, int32_t id);
// A logprob JSON can carry: -inf (and NaN) as -9999.0, as vLLM sends it.
double finite_logprob(float v);

// vLLM's error type names by status ("BadRequestError", "NotFoundError", ...).
const char* error_type(int status);
// {"error": {"message", "type", "param", "code"}} in OpenAI's order.
ojson error_object(const ApiError& e);
ojson error_object(int status, const std::string& message, const std::string& param = {});  // the default code
std::string dump(const ojson& j);  // compact; invalid UTF-8 replaced
// Seconds since the epoch: the "created" of responses.
int64_t unix_now();
// `prefix` and 32 random hex digits: response, call and request ids. Any thread.
std::string random_id(const char* prefix);

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
// Objects of an order-keeping parse hold at most this many keys.
constexpr size_t kMaxOrderedKeys = 10000;
// The body again, parsed with its keys in the order the client wrote them
// (templates print tools and arguments in that order), after
// parse_json_object took it. An order-keeping object finds each new key by a
// linear search, so an object of n keys costs n^2 (200,000 keys: 32 s): one
// over kMaxOrderedKeys is a 400 before that cost is paid.
ojson parse_ordered_body(std::string_view body);

// OpenAI's tools: [{"type": "function", "function": {"name": non-empty string,
// "description"?: string, "parameters"?: object}}]; 400 naming the index and field.
void validate_tools(const json& tools);

// max_tokens from the request, else the endpoint's default (16 for
// completions and /generate; chat: what is left of the context, capped by
// generation_config's max_new_tokens); 400 when it overflows the context.
int resolve_max_tokens(const SamplingRequest& s, Endpoint ep, int prompt_len, int max_model_len,
                       const model::GenerationDefaults& g);
// resolve_max_tokens into s.options.sampling.max_tokens, then the check that
// min_tokens does not exceed it (400). Every frontend settles a request so.
void settle_max_tokens(SamplingRequest& s, Endpoint ep, int prompt_len, int max_model_len,
                       const model::GenerationDefaults& g);

}  // namespace halo::serve
