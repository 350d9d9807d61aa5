#include "serve/api_common.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <limits>
#include <random>
#include <span>

#include "common/json_depth.h"
#include "serve/guided_request.h"
#include "text/jinja/chat_template.h"
#include "text/tokenizer/tokenizer.h"

namespace halo::serve {

const char* error_type(int status) {
  switch (status) {
    case 400: return "BadRequestError";
    case 401: return "AuthenticationError";
    case 403: return "PermissionDeniedError";
    case 404: return "NotFoundError";
    case 405: return "MethodNotAllowedError";
    case 413: return "RequestEntityTooLargeError";
    case 429: return "RateLimitError";
    case 503: return "ServiceUnavailableError";
    default: return status >= 500 ? "InternalServerError" : "BadRequestError";
  }
}

const char* default_error_code(int status) {
  switch (status) {
    case 400: return error_code::kInvalidRequest;
    case 401: return error_code::kInvalidApiKey;
    case 429: return error_code::kRateLimit;
    default: return nullptr;
  }
}

std::optional<std::string> ApiError::code() const {
  if (code_) return code_->empty() ? std::nullopt : code_;
  const char* d = default_error_code(status_);
  return d ? std::optional<std::string>(d) : std::nullopt;
}

ojson error_object(const ApiError& err) {
  ojson e;
  e["message"] = err.what();
  e["type"] = error_type(err.status());
  e["param"] = err.param().empty() ? ojson(nullptr) : ojson(err.param());
  auto code = err.code();
  e["code"] = code ? ojson(*code) : ojson(nullptr);
  return ojson{{"error", std::move(e)}};
}

ojson error_object(int status, const std::string& message, const std::string& param) {
  return error_object(ApiError(status, message, param));
}

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:016x}", prefix, rng(), rng());
}

namespace {
std::string type_name(const json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}
[[noreturn]] void bad_type(const std::string& name, const char* expected, const json& v) {
  throw ApiError(400, fmt::format("'{}' must be {}, got {}", name, expected, type_name(v)), name,
                 error_code::kInvalidType);
}
}  // namespace

const json* Fields::get(const std::string& name) {
  used_.insert(name);
  auto it = j_.find(name);
  if (it == j_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<bool> Fields::boolean(const std::string& name) {
  const json* v = get(name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad_type(name, "a boolean", *v);
  return v->get<bool>();
}

namespace {
[[noreturn]] void out_of_range(const std::string& name, int64_t lo, int64_t hi, const json& v) {
  throw ApiError(400, fmt::format("'{}' must be an integer in [{}, {}], got {}", name, lo, hi, v.dump()), name,
                 error_code::kInvalidValue);
}
}  // namespace

// The value is compared as sent: a number past int64 or a float such as 3e9
// is reported as itself, never wrapped into range.
std::optional<int64_t> Fields::integer(const std::string& name, int64_t lo, int64_t hi) {
  const json* v = get(name);
  if (!v) return std::nullopt;
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    if (v->get<uint64_t>() > uint64_t(hi)) out_of_range(name, lo, hi, *v);
    x = static_cast<int64_t>(v->get<uint64_t>());
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_float()) {
    double d = v->get<double>();
    if (!std::isfinite(d))
      throw ApiError(400, fmt::format("'{}' is not a finite number", name), name, error_code::kInvalidValue);
    if (d != std::floor(d)) bad_type(name, "an integer", *v);
    if (d < double(lo) || d > double(hi) || d >= 0x1p63) {  // 2^63: int64 max rounds up to it
      if (d < double(lo) && hi >= std::numeric_limits<int32_t>::max())
        throw ApiError(400, fmt::format("'{}' must be at least {}, got {}", name, lo, v->dump()), name,
                       error_code::kInvalidValue);
      out_of_range(name, lo, hi, *v);
    }
    x = static_cast<int64_t>(d);
  } else {
    bad_type(name, "an integer", *v);
  }
  if (x < lo && hi >= std::numeric_limits<int32_t>::max())
    throw ApiError(400, fmt::format("'{}' must be at least {}, got {}", name, lo, x), name, error_code::kInvalidValue);
  if (x < lo || x > hi) out_of_range(name, lo, hi, *v);
  return x;
}

std::optional<double> Fields::number(const std::string& name) {
  const json* v = get(name);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad_type(name, "a number", *v);
  double d = v->get<double>();
  // 1e400 parses as infinity: say so rather than "got inf".
  if (!std::isfinite(d))
    throw ApiError(400, fmt::format("'{}' is not a finite number", name), name, error_code::kInvalidValue);
  return d;
}

std::optional<std::string> Fields::string(const std::string& name) {
  const json* v = get(name);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad_type(name, "a string", *v);
  return v->get<std::string>();
}

void Fields::log_unknown(const std::string& endpoint) const {
  if (!j_.is_object() || !spdlog::should_log(spdlog::level::debug)) return;
  for (auto it = j_.begin(); it != j_.end(); ++it)
    if (!used_.count(it.key())) spdlog::debug("{}: ignoring unknown field '{}'", endpoint, it.key());
}

std::string context_length_message(int max_model_len, int prompt_tokens, int max_tokens) {
  return fmt::format(
      "This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the messages, {} "
      "in the completion). Please reduce the length of the messages or completion.",
      max_model_len, prompt_tokens + max_tokens, prompt_tokens, max_tokens);
}

json parse_request_json(const std::string& text, int max_depth, const std::string& what) {
  std::string last_key;  // names the field of a number that overflows
  try {
    return parse_json_bounded(text, max_depth, true, &last_key);
  } catch (const JsonTooDeep&) {
    throw ApiError(400, fmt::format("{} is nested deeper than {} levels (--max-request-json-depth)", what,
                                    max_depth));
  } catch (const json::out_of_range& e) {
    // 1e400: nlohmann stops at the overflow (id 406); the last key read is its field.
    if (e.id == 406 && !last_key.empty())
      throw ApiError(400, fmt::format("'{}' is not a finite number (it overflows a double)", last_key), last_key,
                     error_code::kInvalidValue);
    throw ApiError(400, fmt::format("{} is not valid JSON: {}", what, e.what()));
  } catch (const json::exception& e) {
    throw ApiError(400, fmt::format("{} is not valid JSON: {}", what, e.what()));
  }
}

ojson parse_ordered_body(std::string_view body) {
  std::vector<size_t> keys;  // per open object, innermost last
  ojson::parser_callback_t count = [&keys](int, ojson::parse_event_t event, ojson&) {
    if (event == ojson::parse_event_t::object_start) keys.push_back(0);
    if (event == ojson::parse_event_t::object_end) keys.pop_back();
    if (event == ojson::parse_event_t::key && ++keys.back() > kMaxOrderedKeys)
      throw ApiError(400, fmt::format("an object in the request body has more than {} keys", kMaxOrderedKeys));
    return true;
  };
  return ojson::parse(body, count);
}

json parse_json_object(const std::string& body, int max_depth) {
  json j = parse_request_json(body, max_depth);
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return j;
}

void validate_tools(const json& tools) {
  if (!tools.is_array()) throw ApiError(400, "'tools' must be a list", "tools", error_code::kInvalidType);
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    auto bad = [i](const std::string& what) {
      throw ApiError(400, fmt::format("tools[{}]{}", i, what), "tools");
    };
    if (!t.is_object()) bad(" must be an object {\"type\": \"function\", \"function\": {...}}");
    auto type = t.find("type");
    if (type == t.end() || *type != "function") bad(".type must be \"function\"");
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) bad(".function must be an object");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get_ref<const std::string&>().empty())
      bad(".function.name must be a non-empty string");
    if (auto d = fn->find("description"); d != fn->end() && !d->is_null() && !d->is_string())
      bad(".function.description must be a string");
    if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null() && !p->is_object())
      bad(".function.parameters must be an object (a JSON schema)");
  }
}

ApiError to_api_error(const std::exception_ptr& ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const ApiError& e) {
    return e;
  } catch (const text::TemplateError& e) {
    return ApiError(400, e.what(), "messages");  // what() already says "chat template [line N]: "
  } catch (const json::exception& e) {
    return ApiError(400, std::string("invalid request: ") + e.what());
  } catch (const FieldError& e) {
    return ApiError(400, e.what(), e.field(), error_code::kInvalidValue);
  } catch (const Error& e) {
    return ApiError(400, e.what());
  } catch (const std::exception& e) {
    spdlog::error("request failed: {}", e.what());
    return ApiError(500, std::string("internal error: ") + e.what());
  } catch (...) {
    spdlog::error("request failed: unknown exception");
    return ApiError(500, "internal error");
  }
}

HttpResponse error_http_response(const std::exception_ptr& ep, ErrorFormat format) {
  ApiError e = to_api_error(ep);
  HttpResponse r = format(e);
  r.headers.insert(r.headers.end(), e.headers.begin(), e.headers.end());
  return r;
}

int resolve_max_tokens(const SamplingRequest& s, Endpoint ep, int prompt_len, int max_model_len,
                       const model::GenerationDefaults& g) {
  if (s.max_tokens) {
    if (prompt_len + *s.max_tokens > max_model_len)
      throw ApiError(400, context_length_message(max_model_len, prompt_len, *s.max_tokens),
                     ep == Endpoint::kChat ? "messages" : "prompt", error_code::kContextLength);
    return *s.max_tokens;
  }
  int room = max_model_len - prompt_len;
  if (ep == Endpoint::kChat) {
    // vLLM: what is left of the context, capped by generation_config's max_new_tokens.
    if (room <= 0)
      throw ApiError(400, context_length_message(max_model_len, prompt_len, 0), "messages", error_code::kContextLength);
    return g.max_new_tokens ? std::min(room, *g.max_new_tokens) : room;
  }
  // OpenAI's default of 16 for completions and /generate.
  if (prompt_len + 16 > max_model_len)
    throw ApiError(400, context_length_message(max_model_len, prompt_len, 16), "prompt", error_code::kContextLength);
  return 16;
}

void settle_max_tokens(SamplingRequest& s, Endpoint ep, int prompt_len, int max_model_len,
                       const model::GenerationDefaults& g) {
  auto& sp = s.options.sampling;
  sp.max_tokens = resolve_max_tokens(s, ep, prompt_len, max_model_len, g);
  if (sp.min_tokens > sp.max_tokens)
    throw ApiError(400,
                   fmt::format("'min_tokens' ({}) must not exceed 'max_tokens' ({})", sp.min_tokens,
                               sp.max_tokens),
                   "min_tokens", error_code::kInvalidValue);
}

namespace {

constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();

float checked_float(Fields& f, const std::string& name, float fallback, double lo, double hi, bool lo_open = false) {
  auto v = f.number(name);
  if (!v) return fallback;
  // The sampler takes floats: 1e39 would become inf there.
  if (std::fabs(*v) > double(std::numeric_limits<float>::max()))
    throw ApiError(400, fmt::format("'{}' is not a finite number as a 32-bit float, got {}", name, *v), name,
                   error_code::kInvalidValue);
  if ( *v < lo || *v > hi || (lo_open && *v == lo)) {
    std::string range = std::isinf(hi) ? fmt::format("{} {}", lo_open ? ">" : ">=", lo)
                                       : fmt::format("in {}{}, {}]", lo_open ? "(" : "[", lo, hi);
    throw ApiError(400, fmt::format("'{}' must be {}, got {}", name, range, *v), name, error_code::kInvalidValue);
  }
  return static_cast<float>(*v);
}

// A list that must be empty/absent because halo cannot honour it.
void reject_nonempty(Fields& f, const std::string& name, const std::string& why) {
  const json* v = f.get(name);
  if (!v) return;
  if ((v->is_array() || v->is_object() || v->is_string()) && v->empty()) return;
  throw ApiError(400, fmt::format("'{}' is not supported by halo: {}", name, why), name,
                 error_code::kUnsupportedParameter);
}

// Stop strings (a string or a list of non-empty strings) and stop token ids
// (within the vocabulary).
void parse_stops(Fields& f, int vocab_size, engine::RequestOptions& o) {
  auto& s = o.sampling;
  if (const json* stop = f.get("stop")) {
    if (stop->is_string()) {
      o.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const auto& x : *stop) {
        if (!x.is_string())
          throw ApiError(400, "'stop' must be a string or a list of strings", "stop", error_code::kInvalidType);
        o.stop.push_back(x.get<std::string>());
      }
    } else {
      throw ApiError(400, "'stop' must be a string or a list of strings", "stop", error_code::kInvalidType);
    }
    for (const auto& x : o.stop)
      if (x.empty()) throw ApiError(400, "'stop' strings must not be empty", "stop", error_code::kInvalidValue);
  }
  if (const json* ids = f.get("stop_token_ids")) {
    if (!ids->is_array())
      throw ApiError(400, "'stop_token_ids' must be a list of token ids", "stop_token_ids", error_code::kInvalidType);
    for (const auto& x : *ids) {
      if (!x.is_number_integer())
        throw ApiError(400, "'stop_token_ids' must be a list of integer token ids", "stop_token_ids",
                       error_code::kInvalidType);
      // Compared as sent (x.dump()): an id past int64 must not wrap into the vocabulary.
      if (x.is_number_unsigned() ? x.get<uint64_t>() >= uint64_t(vocab_size)
                                 : (x.get<int64_t>() < 0 || x.get<int64_t>() >= vocab_size))
        throw ApiError(400,
                       fmt::format("'stop_token_ids' holds {}, outside the vocabulary [0, {})",
                                   x.dump(), vocab_size),
                       "stop_token_ids", error_code::kInvalidValue);
      const int64_t id = x.get<int64_t>();
      s.stop_token_ids.push_back(static_cast<int32_t>(id));
    }
  }
}

// Logprobs: an integer on completions, a boolean + top_logprobs on chat.
void parse_logprobs(Fields& f, Endpoint endpoint, engine::SamplingParams& s) {
  if (endpoint == Endpoint::kChat) {
    bool lp = f.boolean("logprobs").value_or(false);
    auto top = f.integer("top_logprobs", 0, 20);
    if (top && !lp && *top > 0)
      throw ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs");
    if (lp) s.logprobs = static_cast<int>(top.value_or(0));
  } else {
    if (const json* v = f.get("logprobs")) {
      if (v->is_boolean())
        throw ApiError(400, "'logprobs' must be an integer in [0, 20] on this endpoint", "logprobs",
                       error_code::kInvalidType);
      s.logprobs = static_cast<int>(*f.integer("logprobs", 0, 20));
    }
  }
  if (auto pl = f.integer("prompt_logprobs", 0, 20)) s.prompt_logprobs = static_cast<int>(*pl);
}

// Fields accepted for compatibility, and those halo cannot honour yet.
void reject_unsupported(Fields& f) {
  // Accepted for compatibility, no effect on the output.
  f.touch("user");
  f.touch("model");

  // Fields halo cannot honour yet: rejected rather than silently ignored.
  reject_nonempty(f, "logit_bias", "the sampler has no per-token bias");
  reject_nonempty(f, "allowed_token_ids", "the sampler cannot restrict the vocabulary");
  reject_nonempty(f, "bad_words", "the sampler cannot ban words");
  reject_nonempty(f, "logits_processors", "custom logits processors are not available");
  reject_nonempty(f, "guided_whitespace_pattern",
                  "JSON whitespace is fixed by halo's schema compiler; write a guided_grammar for other layouts");
}

// vLLM's beam search fields: use_beam_search, with max(n, best_of) as the
// width, length_penalty and early_stopping (true, false or "never").
void parse_beam(Fields& f, SamplingRequest& r) {
  auto& o = r.options;
  const bool beam = f.boolean("use_beam_search").value_or(false);
  const auto lp = f.number("length_penalty");
  const json* es = f.get("early_stopping");
  if (!beam) {
    if (lp && *lp != 1.0)
      throw ApiError(400, "'length_penalty' only applies to beam search ('use_beam_search': true)",
                     "length_penalty", error_code::kInvalidValue);
    if (es && !(es->is_boolean() && !es->get<bool>()))
      throw ApiError(400, "'early_stopping' only applies to beam search ('use_beam_search': true)",
                     "early_stopping", error_code::kInvalidValue);
    return;
  }
  o.beam.width = std::max(o.n, o.best_of);
  o.best_of = 0;
  if (lp) {
    if (!std::isfinite(*lp))
      throw ApiError(400, "'length_penalty' must be a finite number", "length_penalty",
                     error_code::kInvalidValue);
    o.beam.length_penalty = static_cast<float>(*lp);
  }
  if (es) {
    std::optional<engine::EarlyStopping> e;
    if (es->is_boolean())
      e = es->get<bool>() ? engine::EarlyStopping::kTrue : engine::EarlyStopping::kFalse;
    if (es->is_string()) e = engine::parse_early_stopping(es->get<std::string>());
    if (!e)
      throw ApiError(400, "'early_stopping' must be true, false or \"never\"", "early_stopping",
                     error_code::kInvalidValue);
    o.beam.early_stopping = *e;
  }
  if (r.stream)
    throw ApiError(400,
                   "beam search results are known only at the end: 'stream' cannot be used with "
                   "'use_beam_search'",
                   "stream", error_code::kUnsupportedValue);
  // Deterministic: the model's sampling defaults do not apply; a temperature asked for is refused.
  if (const json* t = f.get("temperature"); t && t->is_number() && t->get<double>() > 0)
    throw ApiError(400, "beam search is deterministic: 'temperature' must be 0", "temperature",
                   error_code::kInvalidValue);
  o.sampling.temperature = 0.0f;
}

}  // namespace

SamplingRequest parse_sampling(Fields& f, Endpoint endpoint, const SamplingDefaults& d) {
  SamplingRequest r;
  auto& o = r.options;
  auto& s = o.sampling;
  const auto& g = d.generation;
  const double inf = std::numeric_limits<double>::infinity();

  bool do_sample = g.do_sample.value_or(true);
  s.temperature =
      checked_float(f, "temperature", do_sample ? g.temperature.value_or(1.0f) : 0.0f, 0.0, inf);
  s.top_p = checked_float(f, "top_p", g.top_p.value_or(1.0f), 0.0, 1.0, /*lo_open=*/true);
  s.top_k = static_cast<int>(f.integer("top_k", -1, kIntMax).value_or(g.top_k.value_or(0)));
  s.min_p = checked_float(f, "min_p", 0.0f, 0.0, 1.0);
  s.repetition_penalty =
      checked_float(f, "repetition_penalty", g.repetition_penalty.value_or(1.0f), 0.0, inf, true);
  s.presence_penalty = checked_float(f, "presence_penalty", 0.0f, -2.0, 2.0);
  s.frequency_penalty = checked_float(f, "frequency_penalty", 0.0f, -2.0, 2.0);
  if (auto seed = f.integer("seed", std::numeric_limits<int64_t>::min(),
                            std::numeric_limits<int64_t>::max()))
    s.seed = static_cast<uint64_t>(*seed);
  s.min_tokens = static_cast<int>(f.integer("min_tokens", 0, kIntMax).value_or(0));
  s.ignore_eos = f.boolean("ignore_eos").value_or(false);

  parse_stops(f, d.vocab_size, o);
  o.include_stop_str_in_output = f.boolean("include_stop_str_in_output").value_or(false);
  o.skip_special_tokens = f.boolean("skip_special_tokens").value_or(true);
  o.spaces_between_special_tokens = f.boolean("spaces_between_special_tokens").value_or(true);
  o.priority = static_cast<int>(f.integer("priority", -kIntMax, kIntMax).value_or(0));

  // Fan-out.
  o.n = static_cast<int>(f.integer("n", 1, kIntMax).value_or(1));
  if (o.n > 64) throw ApiError(400, fmt::format("'n' must be at most 64, got {}", o.n), "n", error_code::kInvalidValue);
  if (auto b = f.integer("best_of", 1, kIntMax)) {
    if (*b > 64)
      throw ApiError(400, fmt::format("'best_of' must be at most 64, got {}", *b), "best_of",
                     error_code::kInvalidValue);
    if (*b < o.n)
      throw ApiError(400, fmt::format("'best_of' ({}) must be at least 'n' ({})", *b, o.n), "best_of",
                     error_code::kInvalidValue);
    o.best_of = static_cast<int>(*b);
  }

  parse_logprobs(f, endpoint, s);

  // Lengths.
  std::optional<int64_t> mt;
  if (endpoint == Endpoint::kChat) mt = f.integer("max_completion_tokens", 1, kIntMax);
  if (!mt) mt = f.integer("max_tokens", 1, kIntMax);
  if (mt) r.max_tokens = static_cast<int>(*mt);
  if (const json* t = f.get("truncate_prompt_tokens")) {
    (void)t;
    auto v = f.integer("truncate_prompt_tokens", -1, kIntMax);
    if (*v == 0)
      throw ApiError(400, "'truncate_prompt_tokens' must be -1 or at least 1", "truncate_prompt_tokens",
                     error_code::kInvalidValue);
    r.truncate_prompt_tokens = static_cast<int>(*v);
  }

  // Streaming.
  r.stream = f.boolean("stream").value_or(false);
  if (const json* so = f.get("stream_options")) {
    if (!so->is_object())
      throw ApiError(400, "'stream_options' must be an object", "stream_options", error_code::kInvalidType);
    if (!r.stream) throw ApiError(400, "'stream_options' is only allowed with 'stream': true", "stream_options");
    Fields sf(*so);
    r.include_usage = sf.boolean("include_usage").value_or(false);
    r.continuous_usage_stats = sf.boolean("continuous_usage_stats").value_or(false);
  }
  parse_beam(f, r);
  parse_guided(f, o);
  if (r.stream && o.best_of > o.n)
    throw ApiError(400, "'best_of' greater than 'n' cannot be streamed: the best are known only at the end", "best_of");

  reject_unsupported(f);
  return r;
}

const char* finish_name(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::kStop: return "stop";
    case engine::FinishReason::kLength: return "length";
    case engine::FinishReason::kAbort: return "abort";
    default: return nullptr;
  }
}

std::string token_text(const text::Tokenizer& tok, int32_t id) {
  try {
    text::Tokenizer::DecodeControl c;
    c.at_sequence_start = false;
    return tok.decode(std::span<const int32_t>(&id, 1), false, c);
  } catch (const std::exception&) {
    return fmt::format("token_id:{}", id);
  }
}

double finite_logprob(float v) { return std::isfinite(v) ? double(v) : -9999.0; }

}  // namespace halo::serve
