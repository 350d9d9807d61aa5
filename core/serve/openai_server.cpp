#include "serve/openai_server.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <random>
#include <string_view>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "serve/api_common.h"

namespace halo::serve {

using engine::FinishReason;
using engine::StreamEvent;
using engine::TokenLogprob;

struct OpenAIServer::PromptInput {
  std::string text;  // the text the prompt came from ("" for token-id prompts)
  bool from_text = false;
  std::vector<int32_t> ids;
};

namespace {

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:016x}", prefix, rng(), rng());
}

HttpResponse json_response(int status, const ojson& body) {
  HttpResponse r;
  r.status = status;
  r.body = dump(body);
  return r;
}

HttpResponse error_response(int status, const std::string& message, const std::string& param = {}) {
  return json_response(status, error_object(status, message, param));
}

HttpResponse openai_error(const ApiError& e) { return json_response(e.status(), error_object(e)); }

// Compares without an early exit, so the time taken does not reveal how much matched.
bool constant_time_equal(const std::string& a, const std::string& b) {
  size_t n = std::max(a.size(), b.size());
  unsigned diff = static_cast<unsigned>(a.size() ^ b.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

// "%2F" -> "/": a model id such as org/name may arrive encoded in a path.
std::string percent_decode(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

double finite_logprob(float v) { return std::isfinite(v) ? double(v) : -9999.0; }

std::string token_text(const text::Tokenizer& tok, int32_t id) {
  try {
    text::Tokenizer::DecodeControl c;
    c.at_sequence_start = false;
    return tok.decode(std::span<const int32_t>(&id, 1), false, c);
  } catch (const std::exception&) {
    return fmt::format("token_id:{}", id);
  }
}

ojson utf8_bytes(const std::string& s) {
  ojson b = ojson::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

const char* finish_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    default: return nullptr;
  }
}

std::vector<int32_t> parse_token_ids(const json& arr, const char* param, int vocab) {
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (const auto& x : arr) {
    if (!x.is_number_integer())
      throw ApiError(400, fmt::format("'{}' token ids must be integers", param), param, error_code::kInvalidType);
    // Compared as sent (x.dump()): an id past int64 must not wrap into the vocabulary.
    if (x.is_number_unsigned() ? x.get<uint64_t>() >= uint64_t(vocab) : (x.get<int64_t>() < 0 || x.get<int64_t>() >= vocab))
      throw ApiError(400, fmt::format("token id {} in '{}' is outside the vocabulary [0, {})", x.dump(), param, vocab),
                     param, error_code::kInvalidValue);
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return ids;
}

}  // namespace

// ------------------------------------------------------------ GenerationJob
//
// One API request: one or more prompts (streams), n choices each. Every
// StreamConsumer call comes from the pump thread; the disconnect/abort flags
// may be set from others.
class GenerationJob : public StreamConsumer, public TrackedJob, public std::enable_shared_from_this<GenerationJob> {
 public:
  struct Choice {
    std::string text;
    std::vector<int32_t> tokens;
    std::vector<TokenLogprob> logprobs;
    const char* finish = nullptr;
    ojson stop_reason = nullptr;
    bool started = false;      // first chunk written (streaming)
    size_t text_offset = 0;    // completions logprobs: characters written so far
  };

  Endpoint kind;
  OpenAIServer& server;
  std::shared_ptr<const OpenAIServer::Model> model;
  std::shared_ptr<Responder> res;
  std::string id, model_name;
  int64_t created = unix_now();
  std::vector<OpenAIServer::PromptInput> prompts;
  std::vector<std::string> engine_ids;
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  SamplingRequest sreq;
  int n = 1;
  bool echo = false;
  std::string chat_echo;       // chat: the final assistant message, with echo
  int completion_logprobs = -1;  // completions: logprobs k
  bool want_prompt_logprobs = false;
  std::vector<Choice> choices;
  std::vector<bool> stream_started, stream_ended;
  size_t num_ended = 0;
  std::atomic<bool> client_gone{false};
  std::atomic<bool> shutdown_abort{false};
  std::string error;  // first error seen
  bool error_sent = false;

  GenerationJob(Endpoint k, OpenAIServer& s, std::shared_ptr<const OpenAIServer::Model> m)
      : kind(k), server(s), model(std::move(m)) {}

  void abort_engine() {
    for (const auto& eid : engine_ids) model->engine->abort(eid);
  }
  void abort_for_shutdown() override {
    shutdown_abort = true;
    abort_engine();
  }

  // ---- StreamConsumer ----
  void on_events(size_t si, std::vector<StreamEvent>& events) override {
    mark_started(si);
    std::string out;
    for (auto& ev : events) {
      Choice& c = choices.at(si * n + ev.index);
      if (!ev.error.empty() && error.empty()) error = ev.error;
      const size_t first_token = c.tokens.size();
      c.tokens.insert(c.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
      c.logprobs.insert(c.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
      if (ev.finished) {
        c.finish = finish_name(ev.finish_reason);
        c.stop_reason = stop_reason(ev.stop_reason);
      }
      if (sreq.stream && !client_gone) append_chunk(out, si, ev, c, first_token);
      c.text += ev.text;
    }
    if (!out.empty()) res->write(std::move(out));
  }

  void on_end(size_t si) override {
    mark_started(si);
    if (stream_ended[si]) return;
    stream_ended[si] = true;
    if (++num_ended == streams.size()) finish();
  }

  void mark_started(size_t si) {
    if (stream_started[si]) return;
    stream_started[si] = true;
    server.job_started_stream(static_cast<int64_t>(prompts[si].ids.size()));
  }

  ojson stop_reason(const std::string& s) const {
    if (s.empty()) return nullptr;
    const auto& stops = sreq.options.stop;
    if (std::find(stops.begin(), stops.end(), s) != stops.end()) return s;
    try {
      return std::stoi(s);
    } catch (const std::exception&) {
      return s;
    }
  }

  int64_t prompt_tokens() const {
    int64_t t = 0;
    for (const auto& p : prompts) t += static_cast<int64_t>(p.ids.size());
    return t;
  }
  int64_t completion_tokens() const {
    int64_t t = 0;
    for (const auto& c : choices) t += static_cast<int64_t>(c.tokens.size());
    return t;
  }
  ojson usage() const {
    int64_t p = prompt_tokens(), c = completion_tokens();
    return ojson{{"prompt_tokens", p}, {"completion_tokens", c}, {"total_tokens", p + c}};
  }

  // ---- logprobs in the two OpenAI shapes ----
  ojson chat_logprob_entry(const TokenLogprob& lp) const {
    const auto& tok = model->tokenizer();
    std::string t = token_text(tok, lp.token);
    ojson e{{"token", t}, {"logprob", finite_logprob(lp.logprob)}, {"bytes", utf8_bytes(t)}};
    ojson top = ojson::array();
    for (size_t k = 0; k < lp.top.size() && int(k) < sreq.options.sampling.logprobs; ++k) {
      std::string tt = token_text(tok, lp.top[k].first);
      top.push_back({{"token", tt}, {"logprob", finite_logprob(lp.top[k].second)}, {"bytes", utf8_bytes(tt)}});
    }
    e["top_logprobs"] = std::move(top);
    return e;
  }

  static ojson empty_completion_logprobs() {
    return ojson{{"text_offset", ojson::array()}, {"token_logprobs", ojson::array()}, {"tokens", ojson::array()},
                 {"top_logprobs", ojson::array()}};
  }

  // Appends tokens (with their logprobs; `lps` may be shorter: missing ones are null).
  void append_completion_logprobs(ojson& lp, const std::vector<int32_t>& tokens, const TokenLogprob* lps,
                                  size_t num_lps, size_t lp_shift, size_t& offset) const {
    const auto& tok = model->tokenizer();
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string t = token_text(tok, tokens[i]);
      lp["tokens"].push_back(t);
      lp["text_offset"].push_back(offset);
      offset += t.size();
      if (i >= lp_shift && i - lp_shift < num_lps) {
        const TokenLogprob& l = lps[i - lp_shift];
        lp["token_logprobs"].push_back(finite_logprob(l.logprob));
        ojson top = ojson::object();
        for (size_t k = 0; k < l.top.size() && int(k) < completion_logprobs; ++k)
          top[token_text(tok, l.top[k].first)] = finite_logprob(l.top[k].second);
        top[t] = finite_logprob(l.logprob);
        lp["top_logprobs"].push_back(std::move(top));
      } else {
        lp["token_logprobs"].push_back(nullptr);
        lp["top_logprobs"].push_back(nullptr);
      }
    }
  }

  // vLLM's prompt_logprobs: [null, {"<id>": {"logprob", "rank", "decoded_token"}, ...}, ...]
  ojson prompt_logprobs_json(size_t si) const {
    const auto& tok = model->tokenizer();
    auto lps = streams[si]->prompt_logprobs();
    ojson out = ojson::array();
    out.push_back(nullptr);
    for (const auto& l : lps) {
      ojson d = ojson::object();
      std::optional<int> rank;
      for (size_t k = 0; k < l.top.size(); ++k)
        if (l.top[k].first == l.token) rank = int(k) + 1;
      d[std::to_string(l.token)] = {{"logprob", finite_logprob(l.logprob)},
                                    {"rank", rank ? ojson(*rank) : ojson(nullptr)},
                                    {"decoded_token", token_text(tok, l.token)}};
      for (size_t k = 0; k < l.top.size(); ++k) {
        auto key = std::to_string(l.top[k].first);
        if (d.contains(key)) continue;
        d[key] = {{"logprob", finite_logprob(l.top[k].second)}, {"rank", int(k) + 1},
                  {"decoded_token", token_text(tok, l.top[k].first)}};
      }
      out.push_back(std::move(d));
    }
    return out;
  }

  std::string prompt_text(size_t si) const {
    const auto& p = prompts[si];
    if (p.from_text) return p.text;
    return model->tokenizer().decode(p.ids, sreq.options.skip_special_tokens);
  }

  // ---- streaming ----
  ojson chunk_head(const char* object) const {
    return ojson{{"id", id}, {"object", object}, {"created", created}, {"model", model_name}};
  }

  void write_sse(std::string& out, const ojson& j) const {
    out += "data: ";
    out += dump(j);
    out += "\n\n";
  }

  void add_running_usage(ojson& chunk) const {
    if (sreq.continuous_usage_stats) chunk["usage"] = usage();
  }

  void begin_stream() {
    if (kind == Endpoint::kGenerate) {
      res->begin_stream(200, "application/json");
      return;
    }
    res->begin_stream(200, "text/event-stream", {{"X-Accel-Buffering", "no"}});
    if (kind == Endpoint::kChat) {
      // The first delta of every choice carries the role (and an echoed message).
      std::string out;
      for (int i = 0; i < n; ++i) {
        ojson ch = chunk_head("chat.completion.chunk");
        ojson delta{{"role", "assistant"}, {"content", chat_echo}};
        ch["choices"] = ojson::array({ojson{{"index", i}, {"delta", delta}, {"logprobs", nullptr},
                                            {"finish_reason", nullptr}}});
        add_running_usage(ch);
        write_sse(out, ch);
      }
      res->write(std::move(out));
    }
  }

  void append_chunk(std::string& out, size_t si, const StreamEvent& ev, Choice& c, size_t first_token) {
    const int index = static_cast<int>(si * n + ev.index);
    if (!ev.error.empty() || (ev.finish_reason == FinishReason::kAbort && shutdown_abort)) {
      if (!error_sent) {
        error_sent = true;
        int status = ev.error.empty() ? 503 : 500;
        std::string msg = ev.error.empty() ? "the server is shutting down" : ev.error;
        write_sse(out, error_object(status, msg));
      }
      return;
    }
    if (kind == Endpoint::kGenerate) {
      // vLLM's demo /generate: the whole text so far of every choice, objects separated by "\0".
      ojson texts = ojson::array();
      for (int i = 0; i < n; ++i) {
        const Choice& cc = choices[si * n + i];
        texts.push_back(prompt_text(si) + cc.text + (i == ev.index ? ev.text : std::string()));
      }
      out += dump(ojson{{"text", texts}});
      out += '\0';
      return;
    }
    const bool have_logprobs = sreq.options.sampling.logprobs >= 0 && !ev.logprobs.empty();
    if (ev.text.empty() && !ev.finished && !have_logprobs && c.started) return;
    if (kind == Endpoint::kChat) {
      ojson ch = chunk_head("chat.completion.chunk");
      ojson delta = ojson::object();
      if (!ev.text.empty() || !ev.finished) delta["content"] = ev.text;
      ojson choice{{"index", index}, {"delta", delta}};
      if (sreq.options.sampling.logprobs >= 0) {
        ojson content = ojson::array();
        for (const auto& lp : ev.logprobs) content.push_back(chat_logprob_entry(lp));
        choice["logprobs"] = ojson{{"content", content}, {"refusal", nullptr}};
      } else {
        choice["logprobs"] = nullptr;
      }
      choice["finish_reason"] = c.finish && ev.finished ? ojson(c.finish) : ojson(nullptr);
      choice["stop_reason"] = ev.finished ? c.stop_reason : ojson(nullptr);
      ch["choices"] = ojson::array({choice});
      add_running_usage(ch);
      write_sse(out, ch);
    } else {
      std::string text;
      ojson lp = completion_logprobs >= 0 ? empty_completion_logprobs() : ojson(nullptr);
      if (!c.started && echo) {
        // Echo: the prompt (and its logprobs) come first.
        text = prompt_text(si);
        if (completion_logprobs >= 0) {
          auto plp = streams[si]->prompt_logprobs();
          append_completion_logprobs(lp, prompts[si].ids, plp.data(), plp.size(), 1, c.text_offset);
        }
      }
      text += ev.text;
      if (completion_logprobs >= 0) {
        std::vector<int32_t> toks(c.tokens.begin() + static_cast<long>(first_token), c.tokens.end());
        append_completion_logprobs(lp, toks, ev.logprobs.data(), ev.logprobs.size(), 0, c.text_offset);
      }
      ojson ch = chunk_head("text_completion");
      ch["choices"] = ojson::array({ojson{{"index", index},
                                          {"text", text},
                                          {"logprobs", lp},
                                          {"finish_reason", c.finish && ev.finished ? ojson(c.finish) : ojson(nullptr)},
                                          {"stop_reason", ev.finished ? c.stop_reason : ojson(nullptr)}}});
      add_running_usage(ch);
      write_sse(out, ch);
    }
    c.started = true;
  }

  // ---- the end ----
  void finish() {
    try {
      if (!client_gone) {
        if (sreq.stream) finish_stream();
        else finish_response();
      }
    } catch (const std::exception& e) {
      spdlog::error("{}: building the response failed: {}", id, e.what());
      if (sreq.stream) res->end_stream();
      else res->send(error_response(500, std::string("building the response failed: ") + e.what()));
    }
    server.job_done(this);
  }

  void finish_stream() {
    std::string out;
    if (kind != Endpoint::kGenerate) {
      if (sreq.include_usage) {
        ojson ch = chunk_head(kind == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
        ch["choices"] = ojson::array();
        ch["usage"] = usage();
        write_sse(out, ch);
      }
      out += "data: [DONE]\n\n";
    }
    res->write(std::move(out));
    res->end_stream();
  }

  void finish_response() {
    if (!error.empty()) {
      res->send(error_response(500, error));
      return;
    }
    if (shutdown_abort) {
      res->send(error_response(503, "the server is shutting down"));
      return;
    }
    if (kind == Endpoint::kGenerate) {
      ojson texts = ojson::array();
      for (size_t si = 0; si < prompts.size(); ++si)
        for (int i = 0; i < n; ++i) texts.push_back(prompt_text(si) + choices[si * n + i].text);
      res->send(json_response(200, ojson{{"text", texts}}));
      return;
    }
    ojson body{{"id", id},
               {"object", kind == Endpoint::kChat ? "chat.completion" : "text_completion"},
               {"created", created},
               {"model", model_name}};
    ojson arr = ojson::array();
    for (size_t si = 0; si < prompts.size(); ++si) {
      for (int i = 0; i < n; ++i) {
        Choice& c = choices[si * n + i];
        const int index = static_cast<int>(si * n + i);
        if (kind == Endpoint::kChat) {
          // OpenAI requires `refusal` (null: halo never refuses); vLLM sends it too.
          ojson msg{{"role", "assistant"},
                    {"content", chat_echo + c.text},
                    {"refusal", nullptr},
                    {"tool_calls", ojson::array()}};
          ojson lp = nullptr;
          if (sreq.options.sampling.logprobs >= 0) {
            ojson content = ojson::array();
            for (const auto& l : c.logprobs) content.push_back(chat_logprob_entry(l));
            lp = ojson{{"content", content}, {"refusal", nullptr}};
          }
          arr.push_back(ojson{{"index", index},
                              {"message", msg},
                              {"logprobs", lp},
                              {"finish_reason", c.finish ? ojson(c.finish) : ojson(nullptr)},
                              {"stop_reason", c.stop_reason}});
        } else {
          std::string text = echo ? prompt_text(si) + c.text : c.text;
          ojson lp = nullptr;
          if (completion_logprobs >= 0) {
            lp = empty_completion_logprobs();
            size_t offset = 0;
            if (echo) {
              auto plp = streams[si]->prompt_logprobs();
              append_completion_logprobs(lp, prompts[si].ids, plp.data(), plp.size(), 1, offset);
            }
            append_completion_logprobs(lp, c.tokens, c.logprobs.data(), c.logprobs.size(), 0, offset);
          }
          ojson choice{{"index", index},
                       {"text", text},
                       {"logprobs", lp},
                       {"finish_reason", c.finish ? ojson(c.finish) : ojson(nullptr)},
                       {"stop_reason", c.stop_reason}};
          if (want_prompt_logprobs) choice["prompt_logprobs"] = prompt_logprobs_json(si);
          arr.push_back(std::move(choice));
        }
      }
    }
    body["choices"] = std::move(arr);
    body["usage"] = usage();
    if (kind == Endpoint::kChat)
      body["prompt_logprobs"] = want_prompt_logprobs ? prompt_logprobs_json(0) : ojson(nullptr);
    res->send(json_response(200, body));
  }
};

// ------------------------------------------------------------ OpenAIServer

OpenAIServer::OpenAIServer(ApiConfig config)
    : config_(std::move(config)), pump_(std::make_unique<StreamPump>()), created_(unix_now()) {
  if (config_.served_model_names.empty()) config_.served_model_names.push_back("halo");
  // Requests waiting for a preprocessing thread are bounded like those waiting for the engine.
  pool_ = std::make_unique<PreprocessPool>(config_.preprocess_threads,
                                           static_cast<size_t>(std::max(0, config_.max_queued_requests)));
}

OpenAIServer::~OpenAIServer() {
  pool_.reset();  // its running tasks may still queue jobs on the pump
  pump_.reset();
}

void OpenAIServer::set_engine(std::shared_ptr<engine::AsyncEngine> eng, std::optional<text::ChatTemplate> tpl) {
  add_model(ServedModel::make(config_.served_model_names, config_.model_root, std::move(eng), std::move(tpl)));
  set_ready();
}

void OpenAIServer::add_model(std::shared_ptr<ServedModel> m) {
  std::lock_guard lk(model_mu_);
  for (const auto& name : m->names)
    for (const auto& other : models_)
      if (other->answers_to(name)) throw Error(fmt::format("two models are named '{}'", name));
  models_.push_back(std::move(m));
}

void OpenAIServer::refuse_model(const std::string& name, const std::string& reason) {
  std::lock_guard lk(model_mu_);
  refused_.push_back({name, reason});
}

void OpenAIServer::set_ready() {
  std::lock_guard lk(model_mu_);
  ready_ = true;
}

std::vector<std::shared_ptr<const ServedModel>> OpenAIServer::served_models() const {
  std::lock_guard lk(model_mu_);
  return models_;
}

std::vector<OpenAIServer::Refusal> OpenAIServer::refused_models() const {
  std::lock_guard lk(model_mu_);
  return refused_;
}

bool OpenAIServer::ready() const {
  std::lock_guard lk(model_mu_);
  if (!ready_ || models_.empty()) return false;
  for (const auto& m : models_)
    if (!m->engine->healthy()) return false;
  return true;
}

std::shared_ptr<const ServedModel> OpenAIServer::find_model(const std::string* name) const {
  std::lock_guard lk(model_mu_);
  if (!name || name->empty()) {
    if (models_.empty()) throw ApiError(503, ready_ ? "no model is being served" : "the model is still loading");
    return models_.front();
  }
  for (const auto& m : models_)
    if (m->answers_to(*name)) return m;
  for (const auto& r : refused_)
    if (r.name == *name)
      throw ApiError(404, fmt::format("The model `{}` does not exist. It was refused at load: {}", *name, r.reason),
                     "model", error_code::kModelNotFound);
  if (!ready_) throw ApiError(503, fmt::format("the model `{}` is not loaded yet", *name), "model");
  throw ApiError(404, fmt::format("The model `{}` does not exist.", *name), "model", error_code::kModelNotFound);
}

std::shared_ptr<const ServedModel> OpenAIServer::request_model(const json& body) const {
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return find_model(nullptr);
  if (!it->is_string()) throw ApiError(400, "'model' must be a string", "model", error_code::kInvalidType);
  return find_model(&it->get_ref<const std::string&>());
}

size_t OpenAIServer::active_requests() const {
  std::lock_guard lk(jobs_mu_);
  return jobs_.size() + static_cast<size_t>(preprocessing_);
}

bool OpenAIServer::wait_idle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lk(jobs_mu_);
  return jobs_cv_.wait_until(lk, deadline, [&] { return jobs_.empty() && preprocessing_ == 0; });
}

json OpenAIServer::parse_request(const HttpRequest& req) const {
  return parse_json_object(req.body, config_.limits.max_json_depth);
}

int64_t OpenAIServer::prompt_byte_limit(const ServedModel& m) const {
  return config_.limits.max_prompt_bytes > 0 ? config_.limits.max_prompt_bytes
                                             : kPromptBytesPerToken * std::max(1, m.max_model_len);
}

void OpenAIServer::check_prompt_bytes(const ServedModel& m, size_t bytes, const char* param) const {
  const int64_t limit = prompt_byte_limit(m);
  if (static_cast<int64_t>(bytes) <= limit) return;
  throw ApiError(400,
                 fmt::format("the prompt is {} bytes, over the limit of {} bytes it is tokenized within (the model's "
                             "context is {} tokens; --max-prompt-bytes)",
                             bytes, limit, m.max_model_len),
                 param, error_code::kContextLength);
}

void OpenAIServer::preprocess(const std::shared_ptr<Responder>& res, ErrorFormat format, std::function<void()> work) {
  {
    std::lock_guard lk(jobs_mu_);
    preprocessing_++;
  }
  auto task = [this, res, format, work = std::move(work)] {
    if (!res->disconnected()) {  // the client left while the request waited: nothing to do
      try {
        work();
      } catch (...) {
        HttpResponse r = error_http_response(std::current_exception(), format);
        spdlog::debug("preprocessing -> {} {}", r.status, r.body);
        res->send(std::move(r));
      }
    }
    preprocess_done();
  };
  if (!pool_->submit(std::move(task))) {
    preprocess_done();
    ApiError e(429, fmt::format("the server is at capacity: {} requests are waiting to be tokenized "
                                "(--max-queued-requests {}); retry after 1 s",
                                pool_->waiting(), config_.max_queued_requests));
    e.headers.push_back({"Retry-After", "1"});
    throw e;
  }
}

void OpenAIServer::preprocess_done() {
  {
    std::lock_guard lk(jobs_mu_);
    preprocessing_--;
  }
  jobs_cv_.notify_all();
}

void OpenAIServer::abort_all(const std::string& reason) {
  std::vector<std::shared_ptr<TrackedJob>> live;
  {
    std::lock_guard lk(jobs_mu_);
    for (auto& [p, w] : jobs_)
      if (auto j = w.lock()) live.push_back(std::move(j));
  }
  if (!live.empty()) spdlog::warn("aborting {} requests: {}", live.size(), reason);
  for (auto& j : live) j->abort_for_shutdown();
}

void OpenAIServer::check_auth(const HttpRequest& req) const {
  if (config_.api_key.empty()) return;
  const std::string& h = req.header("authorization");
  std::string token;
  if (h.size() > 7 && (h.compare(0, 7, "Bearer ") == 0 || h.compare(0, 7, "bearer ") == 0)) token = h.substr(7);
  bool ok = constant_time_equal(token, config_.api_key);
  if (!ok) {
    ApiError e(401, h.empty() ? "missing API key: send 'Authorization: Bearer <key>'" : "invalid API key");
    e.headers.push_back({"WWW-Authenticate", "Bearer"});
    throw e;
  }
}

void OpenAIServer::handle(HttpRequest&& req, const std::shared_ptr<Responder>& responder) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string what = fmt::format("{} {} {}", req.remote, req.method, req.path);  // route may move req
  HttpResponse resp;
  bool deferred = false;
  try {
    resp = route(req, responder, deferred);
  } catch (...) {
    resp = error_http_response(std::current_exception(), openai_error);
  }
  if (!deferred) {
    if (resp.status >= 400)
      spdlog::debug("{} -> {} {}", what, resp.status, resp.body);
    else
      spdlog::debug("{} -> {} ({:.2f} ms)", what, resp.status,
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    responder->send(std::move(resp));
  }
}

HttpResponse OpenAIServer::route(HttpRequest& req, const std::shared_ptr<Responder>& res, bool& deferred) {
  const std::string& p = req.path;
  const std::string& m = req.method;
  auto only = [&](const char* method) {
    if (m != method) {
      ApiError e(405, fmt::format("method {} is not allowed on {}; use {}", m, p, method));
      e.headers.push_back({"Allow", method});
      throw e;
    }
  };
  if (p == "/health" || p == "/ping") {
    if (m != "GET" && m != "POST") only("GET");
    return health();
  }
  if (p == "/version") {
    only("GET");
    return json_response(200, ojson{{"version", config_.version}});
  }
  if (p == "/metrics") {
    only("GET");
    return metrics();
  }
  static const char* const kRoutes[] = {"/v1/models", "/v1/completions", "/v1/chat/completions",
                                        "/v1/chat/completions/render", "/generate", "/tokenize", "/detokenize"};
  static constexpr std::string_view kModelPrefix = "/v1/models/";  // OpenAI's retrieve-model route
  const bool one_model = p.size() > kModelPrefix.size() && p.starts_with(kModelPrefix);
  if (!one_model &&
      std::find_if(std::begin(kRoutes), std::end(kRoutes), [&](const char* r) { return p == r; }) == std::end(kRoutes))
    throw ApiError(404, fmt::format("Not Found: {} {}", m, p));
  check_auth(req);
  if (p == "/v1/models") {
    only("GET");
    return models();
  }
  if (one_model) {
    only("GET");
    return model(percent_decode(p.substr(kModelPrefix.size())));
  }
  only("POST");
  const bool generates = p == "/v1/completions" || p == "/v1/chat/completions" || p == "/generate";
  if (generates && draining_) throw ApiError(503, "the server is shutting down");
  // Everything with a body is parsed, rendered and tokenized off the I/O thread.
  auto owned = std::make_shared<HttpRequest>(std::move(req));
  preprocess(res, openai_error, [this, owned, res] { handle_body(*owned, res); });
  deferred = true;
  return {};
}

void OpenAIServer::handle_body(const HttpRequest& req, const std::shared_ptr<Responder>& res) {
  const std::string& p = req.path;
  if (p == "/tokenize") return res->send(tokenize(req));
  if (p == "/detokenize") return res->send(detokenize(req));
  if (p == "/v1/chat/completions/render") return res->send(chat_render(req));
  if (p == "/v1/completions") completions(req, res);
  else if (p == "/v1/chat/completions") chat(req, res);
  else generate(req, res);
}

HttpResponse OpenAIServer::health() {
  {
    std::lock_guard lk(model_mu_);
    if (!ready_) return error_response(503, "the model is still loading");
    if (models_.empty()) return error_response(503, "no model is being served");
  }
  if (!ready()) return error_response(503, "the engine failed (see the server log)");
  HttpResponse r;
  r.content_type = "text/plain";
  return r;
}

namespace {

// OpenAI's Model (id, object, created, owned_by) and vLLM's extra fields.
ojson model_card(const ServedModel& m, const std::string& name, int64_t created) {
  return ojson{{"id", name},
               {"object", "model"},
               {"created", created},
               {"owned_by", "halo"},
               {"root", m.root},
               {"parent", nullptr},
               {"max_model_len", m.max_model_len},
               {"permission", ojson::array()}};
}

}  // namespace

HttpResponse OpenAIServer::models() {
  find_model(nullptr);  // 503 while nothing is loaded
  ojson data = ojson::array();
  for (const auto& m : served_models())
    for (const auto& name : m->names) data.push_back(model_card(*m, name, created_));
  return json_response(200, ojson{{"object", "list"}, {"data", data}});
}

HttpResponse OpenAIServer::model(const std::string& id) {
  auto m = find_model(&id);  // 404 model_not_found, 503 while loading
  return json_response(200, model_card(*m, id, created_));
}

namespace {

// Prometheus text of several models as one exposition: every family's samples
// together, under one HELP/TYPE header (the model_name label tells them apart).
std::string merge_prometheus(const std::vector<std::string>& bodies) {
  std::vector<std::string> order;
  std::unordered_map<std::string, std::string> families;
  for (const auto& body : bodies) {
    std::string current;
    size_t pos = 0;
    while (pos < body.size()) {
      size_t nl = body.find('\n', pos);
      std::string line = body.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
      pos = nl == std::string::npos ? body.size() : nl + 1;
      if (line.empty()) continue;
      if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) {
        size_t end = line.find(' ', 7);
        current = line.substr(7, end == std::string::npos ? std::string::npos : end - 7);
        if (!families.count(current)) order.push_back(current);
        std::string& fam = families[current];
        if (fam.find(line) == std::string::npos) fam += line + "\n";
        continue;
      }
      if (!families.count(current)) order.push_back(current);
      families[current] += line + "\n";
    }
  }
  std::string out;
  for (const auto& name : order) out += families[name];
  return out;
}

}  // namespace

HttpResponse OpenAIServer::metrics() {
  find_model(nullptr);
  std::vector<std::string> bodies;
  for (const auto& m : served_models())
    bodies.push_back(engine::render_prometheus(m->engine->metrics(), m->name(), m->block_size, m->num_blocks));
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = bodies.size() == 1 ? bodies.front() : merge_prometheus(bodies);
  return r;
}

std::string OpenAIServer::render_chat(const Model& m, Fields& f, bool& add_special, std::string* echo_prefix) const {
  const json* messages = f.get("messages");
  if (!messages) throw ApiError(400, "'messages' is required", "messages", error_code::kMissingParameter);
  if (!messages->is_array() || messages->empty())
    throw ApiError(400, "'messages' must be a non-empty list of messages", "messages", error_code::kInvalidType);
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& msg = (*messages)[i];
    if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string())
      throw ApiError(400, fmt::format("messages[{}] must be an object with a string 'role'", i), "messages",
                     error_code::kInvalidType);
    if (msg.contains("content")) {
      const json& c = msg["content"];
      if (!c.is_null() && !c.is_string() && !c.is_array())
        throw ApiError(400, fmt::format("messages[{}].content must be a string, a list of parts or null", i),
                       "messages", error_code::kInvalidType);
    }
  }
  // A template from the request is code run on the server: vLLM's rule.
  auto request_template = f.string("chat_template");
  if (request_template && !config_.limits.trust_request_chat_template)
    throw ApiError(400,
                   "a 'chat_template' in the request is refused: the server runs request templates only with "
                   "--trust-request-chat-template",
                   "chat_template");
  text::ChatRenderRequest rr;
  // The JSON depth limit (parse_request) keeps these recursive copies bounded.
  rr.messages = nlohmann::ordered_json::parse(messages->dump());
  if (const json* tools = f.get("tools")) {
    validate_tools(*tools);
    rr.tools = nlohmann::ordered_json::parse(tools->dump());
  }
  if (auto tc = f.get("tool_choice")) {
    if (!(tc->is_string() && (*tc == "none" || *tc == "auto")))
      throw ApiError(400,
                     "'tool_choice' other than \"none\" or \"auto\" is not supported by halo (no tool-call parsing)",
                     "tool_choice", error_code::kUnsupportedValue);
  }
  if (const json* kw = f.get("chat_template_kwargs")) {
    if (!kw->is_object())
      throw ApiError(400, "'chat_template_kwargs' must be an object", "chat_template_kwargs", error_code::kInvalidType);
    rr.chat_template_kwargs = nlohmann::ordered_json::parse(kw->dump());
  }
  rr.continue_final_message = f.boolean("continue_final_message").value_or(false);
  auto agp = f.boolean("add_generation_prompt");
  if (agp && *agp && rr.continue_final_message)
    throw ApiError(400, "'continue_final_message' and 'add_generation_prompt' cannot both be true",
                   "continue_final_message");
  rr.add_generation_prompt = agp.value_or(!rr.continue_final_message);
  rr.bos_token = m.bos;
  rr.eos_token = m.eos;
  add_special = f.boolean("add_special_tokens").value_or(false);
  if (echo_prefix && f.boolean("echo").value_or(false)) {
    const json& last = messages->back();
    if (last.value("role", "") == "assistant" && last.contains("content") && last["content"].is_string())
      *echo_prefix = last["content"].get<std::string>();
  }
  std::string rendered;
  if (request_template) {
    // The client's code: the default step and depth budget, and no string
    // larger than the prompt the server would tokenize.
    text::jinja::RenderLimits budget;
    budget.max_output_bytes = std::min<size_t>(budget.max_output_bytes, static_cast<size_t>(prompt_byte_limit(m)));
    text::ChatTemplate tpl(*request_template);
    rendered = tpl.render(rr, budget);
  } else {
    if (!m.chat_template)
      throw ApiError(400,
                     "the model has no chat template: start the server with --chat-template (or send 'chat_template' "
                     "to a server started with --trust-request-chat-template)",
                     "messages");
    rendered = m.chat_template->render(rr);
  }
  check_prompt_bytes(m, rendered.size(), "messages");
  return rendered;
}

HttpResponse OpenAIServer::tokenize(const HttpRequest& req) {
  json body = parse_request(req);
  auto mp = request_model(body);
  const Model& m = *mp;
  Fields f(body);
  f.touch("model");
  std::vector<int32_t> ids;
  if (f.get("messages")) {
    bool add_special = false;
    std::string prompt = render_chat(m, f, add_special, nullptr);
    ids = m.tokenizer().encode(prompt, add_special && !text::starts_with_bos(prompt, m.bos));
  } else {
    auto prompt = f.string("prompt");
    if (!prompt)
      throw ApiError(400, "'prompt' (a string) or 'messages' is required", "prompt", error_code::kMissingParameter);
    check_prompt_bytes(m, prompt->size(), "prompt");
    ids = m.tokenizer().encode(*prompt, f.boolean("add_special_tokens").value_or(true));
  }
  ojson out{{"count", ids.size()}, {"max_model_len", m.max_model_len}, {"tokens", ids}};
  if (f.boolean("return_token_strs").value_or(false)) {
    ojson strs = ojson::array();
    for (int32_t id : ids) strs.push_back(token_text(m.tokenizer(), id));
    out["token_strs"] = strs;
  } else {
    out["token_strs"] = nullptr;
  }
  f.log_unknown("/tokenize");
  return json_response(200, out);
}

HttpResponse OpenAIServer::detokenize(const HttpRequest& req) {
  json body = parse_request(req);
  auto mp = request_model(body);
  const Model& m = *mp;
  Fields f(body);
  f.touch("model");
  const json* toks = f.get("tokens");
  if (!toks || !toks->is_array())
    throw ApiError(400, "'tokens' (a list of token ids) is required", "tokens", error_code::kMissingParameter);
  auto ids = parse_token_ids(*toks, "tokens", m.vocab_size);
  f.log_unknown("/detokenize");
  return json_response(200, ojson{{"prompt", m.tokenizer().decode(ids, false)}});
}

HttpResponse OpenAIServer::chat_render(const HttpRequest& req) {
  json body = parse_request(req);
  auto mp = request_model(body);
  const Model& m = *mp;
  Fields f(body);
  f.touch("model");
  bool add_special = false;
  std::string prompt = render_chat(m, f, add_special, nullptr);
  auto ids = m.tokenizer().encode(prompt, add_special && !text::starts_with_bos(prompt, m.bos));
  f.log_unknown("/v1/chat/completions/render");
  return json_response(200, ojson{{"model", m.name()},
                                  {"prompt", prompt},
                                  {"prompt_token_ids", ids},
                                  {"num_tokens", ids.size()}});
}

// ---- admission ----

void OpenAIServer::admit(const Model& m, int64_t reqs, int64_t tokens) {
  std::lock_guard lk(jobs_mu_);
  bool over_requests = config_.max_queued_requests > 0 && queued_requests_ + reqs > config_.max_queued_requests;
  // A request larger than the token budget is still admitted into an empty queue.
  bool over_tokens =
      config_.max_queued_tokens > 0 && queued_tokens_ > 0 && queued_tokens_ + tokens > config_.max_queued_tokens;
  if (over_requests || over_tokens) {
    std::string what = over_requests
                           ? fmt::format("{} requests are waiting (--max-queued-requests {})", queued_requests_,
                                         config_.max_queued_requests)
                           : fmt::format("{} prompt tokens are waiting (--max-queued-tokens {})", queued_tokens_,
                                         config_.max_queued_tokens);
    // Retry-After: about the time the queue ahead takes, from the mean request latency.
    double mean = 1.0;
    auto em = m.engine->metrics();
    if (em.e2e_request_latency_seconds.count() > 0)
      mean = em.e2e_request_latency_seconds.sum() / double(em.e2e_request_latency_seconds.count());
    int waves = int((queued_requests_ + m.max_num_seqs - 1) / std::max(1, m.max_num_seqs));
    int retry = std::clamp(static_cast<int>(std::ceil(mean * std::max(1, waves))), 1, 60);
    ApiError e(429, fmt::format("the server is at capacity: {}; retry after {} s", what, retry));
    e.headers.push_back({"Retry-After", std::to_string(retry)});
    throw e;
  }
  queued_requests_ += reqs;
  queued_tokens_ += tokens;
}

void OpenAIServer::job_started_stream(int64_t prompt_tokens) {
  std::lock_guard lk(jobs_mu_);
  queued_requests_--;
  queued_tokens_ -= prompt_tokens;
}

void OpenAIServer::track(const std::shared_ptr<TrackedJob>& job) {
  std::lock_guard lk(jobs_mu_);
  jobs_[job.get()] = job;
}

void OpenAIServer::job_done(TrackedJob* job) {
  {
    std::lock_guard lk(jobs_mu_);
    jobs_.erase(job);
  }
  jobs_cv_.notify_all();
}

void OpenAIServer::start_job(std::shared_ptr<GenerationJob> job, const std::shared_ptr<Responder>& res) {
  const Model& m = *job->model;
  auto& opts = job->sreq.options;
  // Validate every prompt before queuing any.
  int64_t prompt_tokens = 0;
  for (const auto& p : job->prompts) {
    m.engine->engine().validate_request(p.ids, opts.sampling);
    prompt_tokens += static_cast<int64_t>(p.ids.size());
  }
  admit(m, static_cast<int64_t>(job->prompts.size()), prompt_tokens);
  job->res = res;
  job->choices.resize(job->prompts.size() * job->n);
  job->stream_started.assign(job->prompts.size(), false);
  job->stream_ended.assign(job->prompts.size(), false);
  size_t added = 0;
  try {
    for (size_t i = 0; i < job->prompts.size(); ++i) {
      std::string eid = job->prompts.size() > 1 ? fmt::format("{}-{}", job->id, i) : job->id;
      job->streams.push_back(m.engine->add_request(eid, job->prompts[i].ids, opts));
      job->engine_ids.push_back(eid);
      ++added;
    }
  } catch (...) {
    job->abort_engine();
    for (size_t i = 0; i < job->prompts.size(); ++i)
      job_started_stream(static_cast<int64_t>(job->prompts[i].ids.size()));
    throw;
  }
  track(job);
  std::weak_ptr<GenerationJob> weak = job;
  res->on_disconnect([weak] {
    if (auto j = weak.lock()) {
      j->client_gone = true;
      spdlog::info("{}: client disconnected, aborting", j->id);
      j->abort_engine();
    }
  });
  if (job->sreq.stream) job->begin_stream();
  for (size_t i = 0; i < job->streams.size(); ++i) pump_->add(job->streams[i], job, i);
}

// ---- generation endpoints ----

namespace {

void truncate(std::vector<int32_t>& ids, std::optional<int> k, int max_model_len) {
  if (!k) return;
  int keep = *k < 0 ? max_model_len : *k;
  if (keep > max_model_len)
    throw ApiError(400,
                   fmt::format("'truncate_prompt_tokens' ({}) must not exceed the maximum context length ({})", keep,
                               max_model_len),
                   "truncate_prompt_tokens", error_code::kInvalidValue);
  if (static_cast<int>(ids.size()) > keep) ids.erase(ids.begin(), ids.end() - keep);
}

}  // namespace

void OpenAIServer::completions(const HttpRequest& req, const std::shared_ptr<Responder>& res) {
  json body = parse_request(req);
  std::shared_ptr<const Model> mp = request_model(body);
  const Model& m = *mp;
  Fields f(body);
  f.touch("model");

  auto job = std::make_shared<GenerationJob>(Endpoint::kCompletions, *this, mp);
  job->id = random_id("cmpl-");
  job->model_name = m.name();
  job->sreq = parse_sampling(f, Endpoint::kCompletions, m.defaults);
  if (const json* suffix = f.get("suffix"); suffix && !(suffix->is_string() && suffix->get<std::string>().empty()))
    throw ApiError(400, "'suffix' is not supported by halo (no fill-in-the-middle)", "suffix",
                   error_code::kUnsupportedParameter);
  job->echo = f.boolean("echo").value_or(false);
  bool add_special = f.boolean("add_special_tokens").value_or(true);

  const json* pj = f.get("prompt");
  if (!pj) throw ApiError(400, "'prompt' is required", "prompt", error_code::kMissingParameter);
  const char* shape =
      "'prompt' must be a string, a list of strings, a list of token ids or a list of token-id lists";
  if (pj->is_string()) {
    job->prompts.push_back({pj->get<std::string>(), true, {}});
  } else if (pj->is_array()) {
    if (pj->empty()) throw ApiError(400, "'prompt' must not be an empty list", "prompt");
    const json& first = (*pj)[0];
    if (first.is_string()) {
      for (const auto& x : *pj) {
        if (!x.is_string()) throw ApiError(400, shape, "prompt", error_code::kInvalidType);
        job->prompts.push_back({x.get<std::string>(), true, {}});
      }
    } else if (first.is_number_integer()) {
      job->prompts.push_back({"", false, parse_token_ids(*pj, "prompt", m.vocab_size)});
    } else if (first.is_array()) {
      for (const auto& x : *pj) {
        if (!x.is_array() || x.empty()) throw ApiError(400, shape, "prompt", error_code::kInvalidType);
        job->prompts.push_back({"", false, parse_token_ids(x, "prompt", m.vocab_size)});
      }
    } else {
      throw ApiError(400, shape, "prompt", error_code::kInvalidType);
    }
  } else {
    throw ApiError(400, shape, "prompt", error_code::kInvalidType);
  }
  if (job->prompts.size() > 1024)
    throw ApiError(400, "'prompt' holds more than 1024 prompts", "prompt", error_code::kInvalidValue);
  for (const auto& p : job->prompts) check_prompt_bytes(m, p.text.size(), "prompt");  // all before any is tokenized
  for (auto& p : job->prompts) {
    if (p.from_text) p.ids = m.tokenizer().encode(p.text, add_special);
    if (p.ids.empty()) throw ApiError(400, "the prompt is empty", "prompt", error_code::kInvalidValue);
    truncate(p.ids, job->sreq.truncate_prompt_tokens, m.max_model_len);
  }
  auto& s = job->sreq.options.sampling;
  job->completion_logprobs = s.logprobs;
  job->want_prompt_logprobs = s.prompt_logprobs >= 0;
  if (job->echo && s.logprobs >= 0) s.prompt_logprobs = std::max(s.prompt_logprobs, s.logprobs);
  int max_tokens = 0;
  for (const auto& p : job->prompts)
    max_tokens = resolve_max_tokens(job->sreq, Endpoint::kCompletions, static_cast<int>(p.ids.size()),
                                    m.max_model_len, m.defaults.generation);
  s.max_tokens = max_tokens;
  if (s.min_tokens > s.max_tokens)
    throw ApiError(400, fmt::format("'min_tokens' ({}) must not exceed 'max_tokens' ({})", s.min_tokens, s.max_tokens),
                   "min_tokens", error_code::kInvalidValue);
  job->n = job->sreq.options.n;
  f.log_unknown("/v1/completions");
  start_job(job, res);
}

void OpenAIServer::chat(const HttpRequest& req, const std::shared_ptr<Responder>& res) {
  json body = parse_request(req);
  std::shared_ptr<const Model> mp = request_model(body);
  const Model& m = *mp;
  Fields f(body);
  f.touch("model");

  auto job = std::make_shared<GenerationJob>(Endpoint::kChat, *this, mp);
  job->id = random_id("chatcmpl-");
  job->model_name = m.name();
  job->sreq = parse_sampling(f, Endpoint::kChat, m.defaults);
  bool add_special = false;
  std::string prompt = render_chat(m, f, add_special, &job->chat_echo);
  PromptInput p{prompt, true, m.tokenizer().encode(prompt, add_special && !text::starts_with_bos(prompt, m.bos))};
  truncate(p.ids, job->sreq.truncate_prompt_tokens, m.max_model_len);
  auto& s = job->sreq.options.sampling;
  s.max_tokens = resolve_max_tokens(job->sreq, Endpoint::kChat, static_cast<int>(p.ids.size()), m.max_model_len,
                                    m.defaults.generation);
  if (s.min_tokens > s.max_tokens)
    throw ApiError(400, fmt::format("'min_tokens' ({}) must not exceed 'max_tokens' ({})", s.min_tokens, s.max_tokens),
                   "min_tokens", error_code::kInvalidValue);
  job->want_prompt_logprobs = s.prompt_logprobs >= 0;
  job->prompts.push_back(std::move(p));
  job->n = job->sreq.options.n;
  f.touch("functions");
  f.log_unknown("/v1/chat/completions");
  start_job(job, res);
}

void OpenAIServer::generate(const HttpRequest& req, const std::shared_ptr<Responder>& res) {
  json body = parse_request(req);
  std::shared_ptr<const Model> mp = request_model(body);
  const Model& m = *mp;
  Fields f(body);
  f.touch("model");
  auto job = std::make_shared<GenerationJob>(Endpoint::kGenerate, *this, mp);
  job->id = random_id("generate-");
  job->model_name = m.name();
  if (f.get("logprobs") || f.get("prompt_logprobs"))
    throw ApiError(400, "/generate returns only text: use /v1/completions for logprobs", "logprobs",
                   error_code::kUnsupportedParameter);
  job->sreq = parse_sampling(f, Endpoint::kGenerate, m.defaults);
  auto prompt = f.string("prompt");
  if (!prompt) throw ApiError(400, "'prompt' (a string) is required", "prompt", error_code::kMissingParameter);
  check_prompt_bytes(m, prompt->size(), "prompt");
  PromptInput p{*prompt, true, m.tokenizer().encode(*prompt, true)};
  truncate(p.ids, job->sreq.truncate_prompt_tokens, m.max_model_len);
  auto& s = job->sreq.options.sampling;
  s.max_tokens = resolve_max_tokens(job->sreq, Endpoint::kGenerate, static_cast<int>(p.ids.size()), m.max_model_len,
                                    m.defaults.generation);
  if (s.min_tokens > s.max_tokens)
    throw ApiError(400, fmt::format("'min_tokens' ({}) must not exceed 'max_tokens' ({})", s.min_tokens, s.max_tokens),
                   "min_tokens", error_code::kInvalidValue);
  job->prompts.push_back(std::move(p));
  job->n = job->sreq.options.n;
  f.log_unknown("/generate");
  start_job(job, res);
}

// ---- one prompt for the other frontends ----

// Runs on the preprocessing pool. Draining is checked when the request
// arrives (the frontends' routes): a request accepted before SIGTERM runs.
void OpenAIServer::start_single(std::shared_ptr<SingleJob> job, const std::shared_ptr<Responder>& res) {
  const Model& m = *job->model;
  if (job->options.n != 1 || job->options.best_of > 1)
    throw ApiError(400, "this endpoint returns one sequence: 'n' and 'best_of' must be 1", "n");
  m.engine->engine().validate_request(job->prompt_ids, job->options.sampling);
  const auto tokens = static_cast<int64_t>(job->prompt_ids.size());
  admit(m, 1, tokens);
  job->res_ = res;
  job->on_started_ = [this, tokens] { job_started_stream(tokens); };
  TrackedJob* key = job.get();
  job->on_done_ = [this, key] { job_done(key); };
  try {
    job->stream_ = m.engine->add_request(job->id, job->prompt_ids, job->options);
  } catch (...) {
    job_started_stream(tokens);
    throw;
  }
  track(job);
  std::weak_ptr<SingleJob> weak = job;
  res->on_disconnect([weak] {
    if (auto j = weak.lock()) {
      j->client_gone_ = true;
      spdlog::info("{}: client disconnected, aborting", j->id);
      j->model->engine->abort(j->id);
    }
  });
  if (job->stream) job->write_begin(*res);
  pump_->add(job->stream_, job, 0);
}

}  // namespace halo::serve
