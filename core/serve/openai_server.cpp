#include "serve/openai_server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <string_view>

#include "serve/api_common.h"
#include "serve/chat_output.h"
#include "serve/embeddings_api.h"
#include "serve/messages_api.h"
#include "serve/prompt_input.h"
#include "serve/responses_api.h"
#include "serve/tool_messages.h"

namespace halo::serve {

using engine::FinishReason;
using engine::StreamEvent;
using engine::TokenLogprob;

namespace {

std::string new_tool_call_id() { return random_id("chatcmpl-tool-"); }

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

HttpResponse text_response(std::string text) {
  HttpResponse r;
  r.content_type = "text/plain";
  r.body = std::move(text);
  return r;
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

ojson utf8_bytes(const std::string& s) {
  ojson b = ojson::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

}  // namespace

// ------------------------------------------------------------ OpenAIJob
//
// The OpenAI and vLLM wire format of one generation: completions, chat
// completions and /generate, streamed (SSE; /generate: "\0"-separated JSON)
// or as one response. Every call comes from the Generation (pump thread).
class OpenAIJob : public HttpSink {
 public:
  Endpoint kind;
  std::string id, model_name;
  int64_t created = unix_now();
  SamplingRequest sreq;
  bool echo = false;
  bool ids_as_tokens = false;    // vLLM's return_tokens_as_token_ids: "token_id:{id}" in logprobs
  std::string chat_echo;         // chat: the final assistant message, with echo
  int completion_logprobs = -1;  // completions: logprobs k
  bool want_prompt_logprobs = false;
  ToolChoice tool_choice;  // chat: "required" or a named function makes the text tool_calls
  // chat: the model's parsers ("": none), and whether guided decoding holds the
  // output from its first token (not after a reasoning gate)
  std::string tool_parser, reasoning_parser;
  bool constrained = false;
  // chat: answered in another API's shape (Anthropic's Messages, OpenAI's Responses)
  std::unique_ptr<ChatShape> shape;

  explicit OpenAIJob(Endpoint k) : kind(k) {}

  void on_start(Generation& g) override {
    g_ = &g;
    sent_.assign(g.choices().size(), {});
    if (stream && kind == Endpoint::kChat)
      for (size_t i = 0; i < g.choices().size(); ++i) outputs_.push_back(chat_output());
    if (stream) begin_stream();
  }

  void on_output(Generation& g, size_t choice, const StreamEvent& ev, size_t first_token) override {
    if (stream) append_chunk(choice / static_cast<size_t>(g.n()), choice, ev, first_token);
  }

  void on_error(Generation& g) override {
    if (!stream || error_sent_) return;
    error_sent_ = true;
    if (shape) return shape->error_event(g.error_status(), g.error(), out);
    write_sse(error_object(g.error_status(), g.error()));
  }

 protected:
  HttpResponse error_response(int status, const std::string& message) override {
    if (shape) return json_response(status, shape->error_object(status, message));
    return json_response(status, error_object(status, message));
  }

  void finish(Generation& g) override {
    if (stream) finish_stream();
    else if (g.failed()) res->send(error_response(g.error_status(), g.error()));
    else finish_response();
  }

 private:
  // What was streamed of one choice.
  struct Sent {
    bool started = false;    // first chunk written
    size_t text_offset = 0;  // completions logprobs: characters written so far
  };

  const Generation& g() const { return *g_; }
  const text::Tokenizer& tokenizer() const { return g_->model().tokenizer(); }
  int n() const { return g_->n(); }

  // `out`: a chat choice's output, whose tool calls may make it "tool_calls".
  static ojson finish_json(const ChoiceOutput& c, const ChatOutput* out = nullptr) {
    const char* name = finish_name(c.finish_reason);
    if (out) name = out->finish_reason(name);
    return name ? ojson(name) : ojson(nullptr);
  }

  ChatOutput chat_output() const { return ChatOutput(tool_choice, tool_parser, reasoning_parser, constrained); }

  // vLLM's stop_reason: the stop string as given, or the stop token's id.
  ojson stop_reason(const ChoiceOutput& c) const {
    const std::string& s = c.stop_reason;
    if (s.empty()) return nullptr;
    const auto& stops = sreq.options.stop;
    if (std::find(stops.begin(), stops.end(), s) != stops.end()) return s;
    try {
      return std::stoi(s);
    } catch (const std::exception&) {
      return s;
    }
  }

  ojson usage() const {
    int64_t p = g().prompt_tokens(), c = g().completion_tokens();
    return ojson{{"prompt_tokens", p}, {"completion_tokens", c}, {"total_tokens", p + c}};
  }

  std::string token_label(int32_t id) const {
    return ids_as_tokens ? "token_id:" + std::to_string(id) : token_text(tokenizer(), id);
  }

  // ---- logprobs in the two OpenAI shapes ----
  ojson chat_logprob_entry(const TokenLogprob& lp) const {
    std::string t = token_label(lp.token);
    ojson e{{"token", t}, {"logprob", finite_logprob(lp.logprob)}, {"bytes", utf8_bytes(t)}};
    ojson top = ojson::array();
    for (size_t k = 0; k < lp.top.size() && int(k) < sreq.options.sampling.logprobs; ++k) {
      std::string tt = token_label(lp.top[k].first);
      top.push_back({{"token", tt}, {"logprob", finite_logprob(lp.top[k].second)}, {"bytes", utf8_bytes(tt)}});
    }
    e["top_logprobs"] = std::move(top);
    return e;
  }

  ojson chat_logprobs(const TokenLogprob* lps, size_t count) const {
    if (sreq.options.sampling.logprobs < 0) return nullptr;
    ojson content = ojson::array();
    for (size_t i = 0; i < count; ++i) content.push_back(chat_logprob_entry(lps[i]));
    return ojson{{"content", content}, {"refusal", nullptr}};
  }

  static ojson empty_completion_logprobs() {
    return ojson{{"text_offset", ojson::array()}, {"token_logprobs", ojson::array()}, {"tokens", ojson::array()},
                 {"top_logprobs", ojson::array()}};
  }

  // Appends tokens (with their logprobs; `lps` may be shorter: missing ones are null).
  void append_completion_logprobs(ojson& lp, const std::vector<int32_t>& tokens, const TokenLogprob* lps,
                                  size_t num_lps, size_t lp_shift, size_t& offset) const {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string t = token_label(tokens[i]);
      lp["tokens"].push_back(t);
      lp["text_offset"].push_back(offset);
      offset += t.size();
      if (i >= lp_shift && i - lp_shift < num_lps) {
        const TokenLogprob& l = lps[i - lp_shift];
        lp["token_logprobs"].push_back(finite_logprob(l.logprob));
        ojson top = ojson::object();
        for (size_t k = 0; k < l.top.size() && int(k) < completion_logprobs; ++k)
          top[token_label(l.top[k].first)] = finite_logprob(l.top[k].second);
        top[t] = finite_logprob(l.logprob);
        lp["top_logprobs"].push_back(std::move(top));
      } else {
        lp["token_logprobs"].push_back(nullptr);
        lp["top_logprobs"].push_back(nullptr);
      }
    }
  }

  // The echoed prompt's tokens and logprobs (the first token has none).
  void append_prompt_logprobs(ojson& lp, size_t si, size_t& offset) const {
    auto plp = g().prompt_logprobs(si);
    append_completion_logprobs(lp, g().prompts()[si].ids, plp.data(), plp.size(), 1, offset);
  }

  // vLLM's prompt_logprobs: [null, {"<id>": {"logprob", "rank", "decoded_token"}, ...}, ...]
  ojson prompt_logprobs_json(size_t si) const {
    ojson out_json = ojson::array();
    out_json.push_back(nullptr);
    for (const auto& l : g().prompt_logprobs(si)) {
      ojson d = ojson::object();
      std::optional<int> rank;
      for (size_t k = 0; k < l.top.size(); ++k)
        if (l.top[k].first == l.token) rank = int(k) + 1;
      d[std::to_string(l.token)] = {{"logprob", finite_logprob(l.logprob)},
                                    {"rank", rank ? ojson(*rank) : ojson(nullptr)},
                                    {"decoded_token", token_text(tokenizer(), l.token)}};
      for (size_t k = 0; k < l.top.size(); ++k) {
        auto key = std::to_string(l.top[k].first);
        if (d.contains(key)) continue;
        d[key] = {{"logprob", finite_logprob(l.top[k].second)}, {"rank", int(k) + 1},
                  {"decoded_token", token_text(tokenizer(), l.top[k].first)}};
      }
      out_json.push_back(std::move(d));
    }
    return out_json;
  }

  // ---- streaming ----
  ojson chunk_head(const char* object) const {
    return ojson{{"id", id}, {"object", object}, {"created", created}, {"model", model_name}};
  }

  void write_sse(const ojson& j) {
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
    if (shape) {
      shape->begin(chat_end(), out);
      res->write(std::exchange(out, {}));
      return;
    }
    if (kind != Endpoint::kChat) return;
    // The first delta of every choice carries the role (and an echoed message).
    for (int i = 0; i < n(); ++i) {
      ojson ch = chunk_head("chat.completion.chunk");
      ojson delta{{"role", "assistant"},
                  {"content", tool_choice.forced() ? ojson(nullptr) : ojson(chat_echo)}};
      ch["choices"] = ojson::array(
          {ojson{{"index", i}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
      add_running_usage(ch);
      write_sse(ch);
    }
    res->write(std::exchange(out, {}));
  }

  void append_chunk(size_t si, size_t index, const StreamEvent& ev, size_t first_token) {
    const ChoiceOutput& c = g().choices()[index];
    Sent& sent = sent_[index];
    if (shape) return shape->add(read(outputs_[index], ev.text, ev.finished), &out);
    if (kind == Endpoint::kGenerate) {
      // vLLM's demo /generate: the whole text so far of every choice, objects separated by "\0".
      ojson texts = ojson::array();
      for (int i = 0; i < n(); ++i) texts.push_back(g().prompt_text(si) + g().choices()[si * n() + i].text);
      out += dump(ojson{{"text", texts}});
      out += '\0';
      return;
    }
    const bool have_logprobs = sreq.options.sampling.logprobs >= 0 && !ev.logprobs.empty();
    if (ev.text.empty() && !ev.finished && !have_logprobs && sent.started) return;
    std::vector<ojson> deltas;
    if (kind == Endpoint::kChat) deltas = chat_deltas(index, ev);
    const ojson finish =
        ev.finished ? finish_json(c, kind == Endpoint::kChat ? &outputs_[index] : nullptr) : ojson(nullptr);
    const ojson stop = ev.finished ? stop_reason(c) : ojson(nullptr);
    if (kind == Endpoint::kChat) {
      if (deltas.empty()) {
        if (!ev.finished && !have_logprobs) return;  // parsed: text that decides nothing yet
        deltas.push_back(ojson::object());
      }
      // The event's logprobs and finish go on its last chunk.
      for (size_t k = 0; k < deltas.size(); ++k) {
        const bool last = k + 1 == deltas.size();
        ojson ch = chunk_head("chat.completion.chunk");
        ch["choices"] = ojson::array(
            {ojson{{"index", index},
                   {"delta", std::move(deltas[k])},
                   {"logprobs",
                    last ? chat_logprobs(ev.logprobs.data(), ev.logprobs.size()) : ojson(nullptr)},
                   {"finish_reason", last ? finish : ojson(nullptr)},
                   {"stop_reason", last ? stop : ojson(nullptr)}}});
        add_running_usage(ch);
        write_sse(ch);
      }
    } else {
      std::string text;
      ojson lp = completion_logprobs >= 0 ? empty_completion_logprobs() : ojson(nullptr);
      if (!sent.started && echo) {  // echo: the prompt (and its logprobs) come first
        text = g().prompt_text(si);
        if (completion_logprobs >= 0) append_prompt_logprobs(lp, si, sent.text_offset);
      }
      text += ev.text;
      if (completion_logprobs >= 0) {
        std::vector<int32_t> toks(c.tokens.begin() + static_cast<long>(first_token), c.tokens.end());
        append_completion_logprobs(lp, toks, ev.logprobs.data(), ev.logprobs.size(), 0, sent.text_offset);
      }
      ojson ch = chunk_head("text_completion");
      ch["choices"] = ojson::array(
          {ojson{{"index", index}, {"text", text}, {"logprobs", lp}, {"finish_reason", finish}, {"stop_reason", stop}}});
      add_running_usage(ch);
      write_sse(ch);
    }
    sent.started = true;
  }

  // A chat event's deltas: its text as content, or what the parsers decide
  // of it (reasoning, content, tool_calls entries; none yet: empty).
  std::vector<ojson> chat_deltas(size_t index, const StreamEvent& ev) {
    ChatOutput& o = outputs_[index];
    std::vector<ojson> deltas;
    if (o.passthrough()) {
      if (!ev.text.empty() || !ev.finished) deltas.push_back(ojson{{"content", ev.text}});
      return deltas;
    }
    ChatDelta d = o.feed(ev.text);
    if (ev.finished) append(d, o.finish());
    if (!d.reasoning.empty()) deltas.push_back(ojson{{"reasoning_content", d.reasoning}});
    if (!d.content.empty()) deltas.push_back(ojson{{"content", d.content}});
    for (const auto& t : d.tool_calls)
      deltas.push_back(ojson{{"tool_calls", ojson::array({tool_call_delta_json(t, new_tool_call_id)})}});
    return deltas;
  }

  // ---- another API's shape (one choice) ----
  // A choice's text as the chat path reads it (`finished`: the last of it).
  static ChatDelta read(ChatOutput& o, std::string_view text, bool finished) {
    if (o.passthrough()) return ChatDelta{"", std::string(text), {}};
    ChatDelta d = o.feed(text);
    if (finished) append(d, o.finish());
    return d;
  }

  ChatEnd chat_end() const {
    ChatEnd e{nullptr, "", g().prompt_tokens(), g().completion_tokens()};
    const ChoiceOutput& c = g().choices()[0];
    e.finish = finish_name(c.finish_reason);
    const auto& stops = sreq.options.stop;
    if (!c.stop_reason.empty() && std::find(stops.begin(), stops.end(), c.stop_reason) != stops.end())
      e.stop_sequence = c.stop_reason;
    return e;
  }

  void finish_shaped() {
    ChatOutput o = chat_output();
    shape->add(read(o, g().choices()[0].text, true), nullptr);
    res->send(json_response(200, shape->body(chat_end())));
  }

  // ---- the end ----
  void finish_stream() {
    if (shape) {
      if (!error_sent_ && !g().failed()) shape->end(chat_end(), out);
      return;
    }
    if (kind == Endpoint::kGenerate) return;
    if (sreq.include_usage) {
      ojson ch = chunk_head(kind == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
      ch["choices"] = ojson::array();
      ch["usage"] = usage();
      write_sse(ch);
    }
    out += "data: [DONE]\n\n";
  }

  ojson chat_choice(size_t index) const {
    const ChoiceOutput& c = g().choices()[index];
    // OpenAI requires `refusal` (null: halo never refuses); vLLM sends it too.
    ojson msg{{"role", "assistant"}, {"content", chat_echo + c.text}, {"refusal", nullptr}, {"tool_calls", ojson::array()}};
    ChatOutput o = chat_output();  // the text read as the stream reads it
    if (!o.passthrough()) {
      ChatDelta d = o.feed(c.text);
      append(d, o.finish());
      // Only calls: content is null, as OpenAI's.
      const bool only_calls = !o.calls().empty() && d.content.empty() && chat_echo.empty();
      msg["content"] = tool_choice.forced() || only_calls ? ojson(nullptr) : ojson(chat_echo + d.content);
      msg["tool_calls"] = tool_calls_json(o.calls(), new_tool_call_id);
      if (!reasoning_parser.empty())
        msg["reasoning_content"] = d.reasoning.empty() ? ojson(nullptr) : ojson(d.reasoning);
    }
    return ojson{{"index", index},
                 {"message", msg},
                 {"logprobs", chat_logprobs(c.logprobs.data(), c.logprobs.size())},
                 {"finish_reason", finish_json(c, &o)},
                 {"stop_reason", stop_reason(c)}};
  }

  ojson completion_choice(size_t si, size_t index) const {
    const ChoiceOutput& c = g().choices()[index];
    std::string text = echo ? g().prompt_text(si) + c.text : c.text;
    ojson lp = nullptr;
    if (completion_logprobs >= 0) {
      lp = empty_completion_logprobs();
      size_t offset = 0;
      if (echo) append_prompt_logprobs(lp, si, offset);
      append_completion_logprobs(lp, c.tokens, c.logprobs.data(), c.logprobs.size(), 0, offset);
    }
    ojson choice{{"index", index},
                 {"text", text},
                 {"logprobs", lp},
                 {"finish_reason", finish_json(c)},
                 {"stop_reason", stop_reason(c)}};
    if (want_prompt_logprobs) choice["prompt_logprobs"] = prompt_logprobs_json(si);
    return choice;
  }

  void finish_response() {
    if (shape) return finish_shaped();
    const size_t num_prompts = g().prompts().size();
    if (kind == Endpoint::kGenerate) {
      ojson texts = ojson::array();
      for (size_t si = 0; si < num_prompts; ++si)
        for (int i = 0; i < n(); ++i) texts.push_back(g().prompt_text(si) + g().choices()[si * n() + i].text);
      res->send(json_response(200, ojson{{"text", texts}}));
      return;
    }
    ojson body{{"id", id},
               {"object", kind == Endpoint::kChat ? "chat.completion" : "text_completion"},
               {"created", created},
               {"model", model_name}};
    ojson arr = ojson::array();
    for (size_t si = 0; si < num_prompts; ++si)
      for (size_t i = 0; i < static_cast<size_t>(n()); ++i) {
        const size_t index = si * n() + i;
        arr.push_back(kind == Endpoint::kChat ? chat_choice(index) : completion_choice(si, index));
      }
    body["choices"] = std::move(arr);
    body["usage"] = usage();
    if (kind == Endpoint::kChat) body["prompt_logprobs"] = want_prompt_logprobs ? prompt_logprobs_json(0) : ojson(nullptr);
    res->send(json_response(200, body));
  }

  const Generation* g_ = nullptr;
  std::vector<Sent> sent_;
  // A streamed chat: each choice's output.
  std::vector<ChatOutput> outputs_;
  bool error_sent_ = false;
};

// ------------------------------------------------------------ OpenAIServer

OpenAIServer::OpenAIServer(const FrontendContext& ctx, ApiConfig config)
    : ctx_(ctx), config_(std::move(config)), created_(unix_now()),
      responses_(std::make_shared<ResponseStore>()) {}

std::shared_ptr<const ServedModel> OpenAIServer::request_model(const json& body) const {
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return ctx_.core().find_model(nullptr);
  if (!it->is_string()) throw ApiError(400, "'model' must be a string", "model", error_code::kInvalidType);
  return ctx_.core().find_model(&it->get_ref<const std::string&>());
}

std::string OpenAIServer::served_name(const json& body, const Model& m) {
  const auto it = body.find("model");
  if (m.loras && it != body.end() && it->is_string() && m.loras->has(it->get<std::string>()))
    return it->get<std::string>();
  return m.name();
}

void OpenAIServer::handle(HttpRequest&& req, const std::shared_ptr<Responder>& responder) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string what = fmt::format("{} {} {}", req.remote, req.method, req.path);  // route may move req
  const bool messages_api = req.path == "/v1/messages";
  HttpResponse resp;
  bool deferred = false;
  try {
    resp = route(req, responder, deferred);
  } catch (...) {
    resp = error_http_response(std::current_exception(), messages_api ? anthropic_error : openai_error);
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
  static const char* const kRoutes[] = {"/v1/models",
                                        "/v1/completions",
                                        "/v1/chat/completions",
                                        "/v1/messages",
                                        "/v1/chat/completions/render",
                                        "/generate",
                                        "/tokenize",
                                        "/detokenize",
                                        "/v1/responses",
                                        "/v1/embeddings",
                                        "/v1/load_lora_adapter",
                                        "/v1/unload_lora_adapter"};
  static constexpr std::string_view kModelPrefix = "/v1/models/";  // OpenAI's retrieve-model route
  static constexpr std::string_view kResponsePrefix = "/v1/responses/";  // GET, DELETE one response
  const bool one_model = p.size() > kModelPrefix.size() && p.starts_with(kModelPrefix);
  const bool one_response = p.size() > kResponsePrefix.size() && p.starts_with(kResponsePrefix);
  if (!one_model && !one_response &&
      std::find_if(std::begin(kRoutes), std::end(kRoutes), [&](const char* r) { return p == r; }) == std::end(kRoutes))
    throw ApiError(404, fmt::format("Not Found: {} {}", m, p));
  const bool messages_api = p == "/v1/messages";
  ctx_.check_auth(req, messages_api);  // Anthropic's clients send x-api-key
  if (p == "/v1/models") {
    only("GET");
    return models();
  }
  if (one_model) {
    only("GET");
    return model(percent_decode(p.substr(kModelPrefix.size())));
  }
  if (one_response) {
    if (m != "DELETE") only("GET");
    return stored_response(percent_decode(p.substr(kResponsePrefix.size())), m == "DELETE");
  }
  only("POST");
  const bool generates = p == "/v1/completions" || p == "/v1/chat/completions" ||
                         p == "/generate" || p == "/v1/responses" || p == "/v1/embeddings" ||
                         messages_api;
  if (generates && ctx_.core().draining()) throw ApiError(503, "the server is shutting down");
  // Everything with a body is parsed, rendered and tokenized off the I/O thread.
  const bool admin = p == "/v1/load_lora_adapter" || p == "/v1/unload_lora_adapter";
  auto owned = std::make_shared<HttpRequest>(std::move(req));
  ctx_.preprocess(res, messages_api ? anthropic_error : openai_error,
                  [this, owned, res] { handle_body(*owned, res); },
                  admin ? ServingCore::Lane::kAdmin : ServingCore::Lane::kRequest);
  deferred = true;
  return {};
}

void OpenAIServer::handle_body(const HttpRequest& req, const std::shared_ptr<Responder>& res) {
  const std::string& p = req.path;
  if (p == "/tokenize") return res->send(tokenize(req));
  if (p == "/detokenize") return res->send(detokenize(req));
  if (p == "/v1/chat/completions/render") return res->send(chat_render(req));
  if (p == "/v1/load_lora_adapter") return res->send(load_lora_adapter(req));
  if (p == "/v1/unload_lora_adapter") return res->send(unload_lora_adapter(req));
  if (p == "/v1/completions") completions(req, res);
  else if (p == "/v1/chat/completions") chat(req, res);
  else if (p == "/v1/messages") messages(req, res);
  else if (p == "/v1/responses") responses(req, res);
  else if (p == "/v1/embeddings")
    embeddings(req, res);
  else generate(req, res);
}

HttpResponse OpenAIServer::health() {
  if (std::string why = ctx_.core().not_ready_reason(); !why.empty()) return error_response(503, why);
  HttpResponse r;
  r.content_type = "text/plain";
  return r;
}

namespace {

// OpenAI's Model (id, object, created, owned_by) and vLLM's extra fields.
// A LoRA adapter's card has its source as root and the base as parent, as vLLM's.
ojson model_card(const ServedModel& m, const std::string& name, int64_t created) {
  std::optional<engine::LoraRegistry::Info> adapter;
  if (m.loras && std::find(m.names.begin(), m.names.end(), name) == m.names.end())
    for (const auto& a : m.loras->list())
      if (a.name == name) adapter = a;
  ojson card{{"id", name},
             {"object", "model"},
             {"created", created},
             {"owned_by", "halo"},
             {"root", adapter ? adapter->source : m.root},
             {"parent", adapter ? ojson(m.name()) : ojson(nullptr)},
             {"max_model_len", m.max_model_len},
             {"permission", ojson::array()}};
  if (adapter) card["lora_int_id"] = adapter->id;  // TensorRT-LLM's lora_task_id names it
  return card;
}

}  // namespace

HttpResponse OpenAIServer::models() {
  ctx_.core().find_model(nullptr);  // 503 while nothing is loaded
  ojson data = ojson::array();
  for (const auto& m : ctx_.core().served_models()) {
    for (const auto& name : m->names) data.push_back(model_card(*m, name, created_));
    if (m->loras)
      for (const auto& a : m->loras->list()) data.push_back(model_card(*m, a.name, created_));
  }
  return json_response(200, ojson{{"object", "list"}, {"data", data}});
}

HttpResponse OpenAIServer::model(const std::string& id) {
  auto m = ctx_.core().find_model(&id);  // 404 model_not_found, 503 while loading
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
  ctx_.core().find_model(nullptr);
  std::vector<std::string> bodies;
  for (const auto& m : ctx_.core().served_models())
    bodies.push_back(engine::render_prometheus(m->engine->metrics(), m->name(), m->block_size, m->num_blocks));
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = bodies.size() == 1 ? bodies.front() : merge_prometheus(bodies);
  return r;
}

std::string OpenAIServer::render_chat(const Model& m, Fields& f, std::string_view body, bool& add_special,
                                      std::string* echo_prefix, ToolChoice* tool_choice) const {
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
  if (request_template && !ctx_.core().limits().trust_request_chat_template)
    throw ApiError(400,
                   "a 'chat_template' in the request is refused: the server runs request templates only with "
                   "--trust-request-chat-template",
                   "chat_template");
  text::ChatRenderRequest rr;
  // Fields' JSON has its keys sorted; the template prints messages and tools
  // (their JSON schemas, arguments) in the client's order, as Python would.
  // The body parsed once already, within the depth limit (parse_request).
  const ojson ordered = parse_ordered_body(body);
  rr.messages = ordered["messages"];
  prepare_tool_messages(rr.messages, ctx_.core().limits().max_json_depth);
  if (const json* tools = f.get("tools")) {
    validate_tools(*tools);
    rr.tools = ordered["tools"];
  }
  ToolChoice tc = parse_tool_choice(f);  // validated wherever a chat is rendered
  if (tool_choice) *tool_choice = std::move(tc);
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
    budget.max_output_bytes = std::min<size_t>(budget.max_output_bytes, static_cast<size_t>(ctx_.core().prompt_byte_limit(m)));
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
  ctx_.core().check_prompt_bytes(m, rendered.size(), "messages");
  return rendered;
}

HttpResponse OpenAIServer::tokenize(const HttpRequest& req) {
  json body = ctx_.parse_request(req);
  auto mp = request_model(body);
  const Model& m = *mp;
  Fields f(body);
  f.touch("model");
  std::vector<int32_t> ids;
  if (f.get("messages")) {
    bool add_special = false;
    std::string prompt = render_chat(m, f, req.body, add_special, nullptr);
    ids = m.tokenizer().encode(prompt, add_special && !text::starts_with_bos(prompt, m.bos));
  } else {
    auto prompt = f.string("prompt");
    if (!prompt)
      throw ApiError(400, "'prompt' (a string) or 'messages' is required", "prompt", error_code::kMissingParameter);
    ctx_.core().check_prompt_bytes(m, prompt->size(), "prompt");
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
  json body = ctx_.parse_request(req);
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
  json body = ctx_.parse_request(req);
  auto mp = request_model(body);
  const Model& m = *mp;
  Fields f(body);
  f.touch("model");
  bool add_special = false;
  std::string prompt = render_chat(m, f, req.body, add_special, nullptr);
  auto ids = m.tokenizer().encode(prompt, add_special && !text::starts_with_bos(prompt, m.bos));
  f.log_unknown("/v1/chat/completions/render");
  return json_response(200, ojson{{"model", m.name()},
                                  {"prompt", prompt},
                                  {"prompt_token_ids", ids},
                                  {"num_tokens", ids.size()}});
}

// ---- generation endpoints ----


void OpenAIServer::completions(const HttpRequest& req, const std::shared_ptr<Responder>& res) {
  json body = ctx_.parse_request(req);
  std::shared_ptr<const Model> mp = request_model(body);
  const Model& m = *mp;
  Fields f(body);
  f.touch("model");

  auto job = std::make_shared<OpenAIJob>(Endpoint::kCompletions);
  std::vector<Prompt> prompts;
  job->id = random_id("cmpl-");
  job->model_name = served_name(body, m);
  job->sreq = parse_sampling(f, Endpoint::kCompletions, m.defaults);
  if (const json* suffix = f.get("suffix"); suffix && !(suffix->is_string() && suffix->get<std::string>().empty()))
    throw ApiError(400, "'suffix' is not supported by halo (no fill-in-the-middle)", "suffix",
                   error_code::kUnsupportedParameter);
  job->echo = f.boolean("echo").value_or(false);
  job->ids_as_tokens = f.boolean("return_tokens_as_token_ids").value_or(false);
  bool add_special = f.boolean("add_special_tokens").value_or(true);

  const json* pj = f.get("prompt");
  if (!pj) throw ApiError(400, "'prompt' is required", "prompt", error_code::kMissingParameter);
  prompts = parse_prompts(*pj, "prompt", m.vocab_size);
  for (const auto& p : prompts) ctx_.core().check_prompt_bytes(m, p.text.size(), "prompt");  // all before any is tokenized
  for (auto& p : prompts) {
    if (p.from_text) p.ids = m.tokenizer().encode(p.text, add_special);
    if (p.ids.empty()) throw ApiError(400, "the prompt is empty", "prompt", error_code::kInvalidValue);
    truncate_prompt(p.ids, job->sreq.truncate_prompt_tokens, m.max_model_len);
  }
  auto& s = job->sreq.options.sampling;
  job->completion_logprobs = s.logprobs;
  job->want_prompt_logprobs = s.prompt_logprobs >= 0;
  if (job->echo && s.logprobs >= 0) s.prompt_logprobs = std::max(s.prompt_logprobs, s.logprobs);
  for (const auto& p : prompts)
    settle_max_tokens(job->sreq, Endpoint::kCompletions, static_cast<int>(p.ids.size()),
                      m.max_model_len, m.defaults.generation);
  f.log_unknown("/v1/completions");
  start(job, mp, std::move(prompts), res);
}

// The model whose adapters a load or unload request changes (its "model", else
// the first). 404 while runtime updating is off, as vLLM has no such routes then.
std::shared_ptr<const ServedModel> OpenAIServer::lora_target(const json& body) const {
  if (!config_.allow_runtime_lora_updating)
    throw ApiError(404,
                   "loading LoRA adapters at run time is off: start halo serve with "
                   "--allow-runtime-lora-updating (or VLLM_ALLOW_RUNTIME_LORA_UPDATING=true)");
  auto mp = request_model(body);
  if (!mp->loras)
    throw ApiError(
        400,
        fmt::format("model '{}' serves no LoRA adapters (start it with --enable-lora)", mp->name()),
        "model");
  return mp;
}

// vLLM's runtime adapter routes: {"lora_name", "lora_path"} in, a plain-text
// "Success: ..." out.
HttpResponse OpenAIServer::load_lora_adapter(const HttpRequest& req) {
  json body = ctx_.parse_request(req);
  auto mp = lora_target(body);
  Fields f(body);
  f.touch("model");
  const auto name = f.string("lora_name"), path = f.string("lora_path");
  if (!name || name->empty())
    throw ApiError(400, "'lora_name' (a string) is required", "lora_name",
                   error_code::kMissingParameter);
  if (!path || path->empty())
    throw ApiError(400, "'lora_path' (a string) is required", "lora_path",
                   error_code::kMissingParameter);
  f.touch("load_inplace");
  f.log_unknown("/v1/load_lora_adapter");
  if (mp->answers_to(*name))
    throw ApiError(400, fmt::format("The lora adapter '{}' has already been loaded.", *name),
                   "lora_name");
  try {
    mp->loras->load(*name, *path);
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "lora_path");
  }
  return text_response(fmt::format("Success: LoRA adapter '{}' added successfully.", *name));
}

HttpResponse OpenAIServer::unload_lora_adapter(const HttpRequest& req) {
  json body = ctx_.parse_request(req);
  auto mp = lora_target(body);
  Fields f(body);
  f.touch("model");
  f.touch("lora_int_id");
  const auto name = f.string("lora_name");
  if (!name || name->empty())
    throw ApiError(400, "'lora_name' (a string) is required", "lora_name",
                   error_code::kMissingParameter);
  f.log_unknown("/v1/unload_lora_adapter");
  // Requests running on it hold their own copy and finish on it.
  if (!mp->loras->unload(*name))
    throw ApiError(404, fmt::format("The lora adapter '{}' cannot be found.", *name), "lora_name",
                   error_code::kModelNotFound);
  return text_response(fmt::format("Success: LoRA adapter '{}' removed successfully.", *name));
}

void OpenAIServer::embeddings(const HttpRequest& req, const std::shared_ptr<Responder>& res) {
  json body = ctx_.parse_request(req);
  std::shared_ptr<const Model> mp = request_model(body);
  Fields f(body);
  f.touch("model");
  EmbeddingsRequest er = parse_embeddings(f, *mp, ctx_.core());
  f.log_unknown("/v1/embeddings");
  const std::string name = served_name(body, *mp);
  auto sink = make_embeddings_sink(name, er.base64);
  sink->res = res;
  engine::RequestOptions options;
  options.sampling.pooling = er.pooling;
  options.sampling.lora = mp->lora(name);
  options.sampling.max_tokens = 1;
  ctx_.start(std::make_shared<Generation>(mp, random_id("embd-"), std::move(er.prompts),
                                          std::move(options), sink),
             res);
}

void OpenAIServer::chat(const HttpRequest& req, const std::shared_ptr<Responder>& res) {
  run_chat(req.body, ctx_.parse_request(req), "chatcmpl-", nullptr, res);
}

void OpenAIServer::messages(const HttpRequest& req, const std::shared_ptr<Responder>& res) {
  ctx_.parse_request(req);  // a JSON object within the limits
  std::string body = messages_to_chat_body(req.body);
  json parsed = parse_json_object(body, ctx_.core().limits().max_json_depth + 2);  // tool_use input nests one deeper
  run_chat(body, std::move(parsed), "msg_", anthropic_message, res);
}

void OpenAIServer::responses(const HttpRequest& req, const std::shared_ptr<Responder>& res) {
  ctx_.parse_request(req);  // a JSON object within the limits
  auto r = std::make_shared<ResponsesRequest>(responses_to_chat(req.body, *responses_));
  // The stored conversation of previous_response_id may nest deeper than this request did.
  json parsed = parse_json_object(r->chat_body, ctx_.core().limits().max_json_depth + 4);
  const std::string body = r->chat_body;
  run_chat(body, std::move(parsed), "resp_",
           [r, store = responses_](std::string id, std::string model) {
             return responses_answer(std::move(*r), std::move(id), std::move(model), store);
           },
           res);
}

HttpResponse OpenAIServer::stored_response(const std::string& id, bool erase) {
  if (erase) {
    if (!responses_->erase(id)) throw ApiError(404, fmt::format("No response with id '{}' is stored", id), "response_id");
    return json_response(200, ojson{{"id", id}, {"object", "response"}, {"deleted", true}});
  }
  auto entry = responses_->get(id);
  if (!entry) throw ApiError(404, fmt::format("No response with id '{}' is stored", id), "response_id");
  return json_response(200, entry->response);
}

void OpenAIServer::run_chat(std::string_view text, json body, const char* id_prefix, const ShapeFactory& shape,
                            const std::shared_ptr<Responder>& res) {
  std::shared_ptr<const Model> mp = request_model(body);
  const Model& m = *mp;
  Fields f(body);
  f.touch("model");

  auto job = std::make_shared<OpenAIJob>(Endpoint::kChat);
  job->id = random_id(id_prefix);
  job->model_name = served_name(body, m);
  if (shape) job->shape = shape(job->id, m.name());
  job->sreq = parse_sampling(f, Endpoint::kChat, m.defaults);
  job->ids_as_tokens = f.boolean("return_tokens_as_token_ids").value_or(false);
  bool add_special = false;
  std::string prompt = render_chat(m, f, text, add_special, &job->chat_echo, &job->tool_choice);
  constrain_to_tool_choice(job->tool_choice, job->sreq.options);
  job->tool_parser = m.tool_parser;
  job->reasoning_parser = m.reasoning_parser;
  // Guided decoding holds from the first token, or after a reasoning model's </think>.
  job->constrained = job->sreq.options.guided();
  if (job->constrained && !m.reasoning_parser.empty() && !job->tool_choice.forced())
    if (auto gate = reasoning_gate(m.reasoning_parser, m.tokenizer())) {
      job->sreq.options.sampling.guide_gate = *gate;
      job->constrained = false;
    }
  Prompt p{prompt, true, m.tokenizer().encode(prompt, add_special && !text::starts_with_bos(prompt, m.bos))};
  truncate_prompt(p.ids, job->sreq.truncate_prompt_tokens, m.max_model_len);
  settle_max_tokens(job->sreq, Endpoint::kChat, static_cast<int>(p.ids.size()), m.max_model_len,
                    m.defaults.generation);
  job->want_prompt_logprobs = job->sreq.options.sampling.prompt_logprobs >= 0;
  f.touch("functions");
  f.log_unknown(job->shape ? job->shape->route() : "/v1/chat/completions");
  start(job, mp, {std::move(p)}, res);
}

void OpenAIServer::generate(const HttpRequest& req, const std::shared_ptr<Responder>& res) {
  json body = ctx_.parse_request(req);
  std::shared_ptr<const Model> mp = request_model(body);
  const Model& m = *mp;
  Fields f(body);
  f.touch("model");
  auto job = std::make_shared<OpenAIJob>(Endpoint::kGenerate);
  job->id = random_id("generate-");
  job->model_name = served_name(body, m);
  if (f.get("logprobs") || f.get("prompt_logprobs"))
    throw ApiError(400, "/generate returns only text: use /v1/completions for logprobs", "logprobs",
                   error_code::kUnsupportedParameter);
  job->sreq = parse_sampling(f, Endpoint::kGenerate, m.defaults);
  auto prompt = f.string("prompt");
  if (!prompt) throw ApiError(400, "'prompt' (a string) is required", "prompt", error_code::kMissingParameter);
  ctx_.core().check_prompt_bytes(m, prompt->size(), "prompt");
  Prompt p{*prompt, true, m.tokenizer().encode(*prompt, true)};
  truncate_prompt(p.ids, job->sreq.truncate_prompt_tokens, m.max_model_len);
  settle_max_tokens(job->sreq, Endpoint::kGenerate, static_cast<int>(p.ids.size()), m.max_model_len,
                    m.defaults.generation);
  f.log_unknown("/generate");
  start(job, mp, {std::move(p)}, res);
}

void OpenAIServer::start(const std::shared_ptr<OpenAIJob>& job, std::shared_ptr<const ServedModel> model,
                         std::vector<Prompt> prompts, const std::shared_ptr<Responder>& res) {
  job->res = res;
  job->stream = job->sreq.stream;
  auto options = job->sreq.options;
  options.sampling.lora = model->lora(job->model_name);
  ctx_.start(std::make_shared<Generation>(std::move(model), job->id, std::move(prompts), std::move(options), job), res);
}

}  // namespace halo::serve
