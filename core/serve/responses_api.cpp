#include "serve/responses_api.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <string_view>

namespace halo::serve {

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message,
                      const char* code = error_code::kInvalidValue) {
  throw ApiError(400, message, param, code);
}

std::string type_of(const ojson& j) {
  return j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
}

const ojson* field(const ojson& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string string_field(const ojson& j, const char* key, const std::string& at) {
  const ojson* v = field(j, key);
  if (!v || !v->is_string())
    bad("input", fmt::format("{}.{} must be a string", at, key), error_code::kInvalidType);
  return v->get<std::string>();
}

// A string, or a list of text parts (input_text, output_text, text, refusal),
// joined by newlines. Images, files and audio are refused.
std::string text_of(const ojson& content, const std::string& at) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    bad("input", at + " must be a string or a list of content parts", error_code::kInvalidType);
  std::string out;
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string here = fmt::format("{}[{}]", at, k);
    const ojson& part = content[k];
    if (!part.is_object())
      bad("input", here + " must be an object with a string 'type'", error_code::kInvalidType);
    const std::string type = type_of(part);
    const char* key = type == "refusal" ? "refusal" : "text";
    if (type != "input_text" && type != "output_text" && type != "text" && type != "refusal")
      bad("input",
          fmt::format("{} is a '{}' part: halo takes only text parts (input_text, output_text)",
                      here, type),
          error_code::kUnsupportedValue);
    if (!out.empty()) out += '\n';
    out += string_field(part, key, here);
  }
  return out;
}

// One input item as chat messages, appended to `out`: messages, the
// assistant's function calls (joined to the assistant turn they follow) and
// their outputs. Earlier reasoning is not sent back to the model.
void add_item(const ojson& item, size_t i, ojson& out) {
  const std::string at = fmt::format("input[{}]", i);
  if (!item.is_object()) bad("input", at + " must be an object", error_code::kInvalidType);
  const std::string type = item.contains("type") ? type_of(item) : "message";
  if (type == "message") {
    std::string role = string_field(item, "role", at);
    if (role == "developer") role = "system";
    if (role != "user" && role != "assistant" && role != "system")
      bad("input", fmt::format("{}.role must be \"user\", \"assistant\", \"system\" or "
                               "\"developer\", not \"{}\"",
                               at, role));
    const ojson* content = field(item, "content");
    if (!content) bad("input", at + ".content is required", error_code::kMissingParameter);
    out.push_back(ojson{{"role", role}, {"content", text_of(*content, at + ".content")}});
  } else if (type == "function_call") {
    ojson call{{"id", string_field(item, "call_id", at)},
               {"type", "function"},
               {"function",
                {{"name", string_field(item, "name", at)},
                 {"arguments", string_field(item, "arguments", at)}}}};
    const bool joins = !out.empty() && out.back()["role"] == "assistant";
    if (!joins) out.push_back(ojson{{"role", "assistant"}, {"content", ""}});
    if (!out.back().contains("tool_calls")) out.back()["tool_calls"] = ojson::array();
    out.back()["tool_calls"].push_back(std::move(call));
  } else if (type == "function_call_output") {
    const ojson* output = field(item, "output");
    if (!output) bad("input", at + ".output is required", error_code::kMissingParameter);
    out.push_back(ojson{{"role", "tool"},
                        {"tool_call_id", string_field(item, "call_id", at)},
                        {"content", text_of(*output, at + ".output")}});
  } else if (type != "reasoning") {
    bad("input",
        fmt::format(
            "{} is a '{}' item: halo takes messages, function_call, "
            "function_call_output and reasoning items{}",
            at, type,
            type == "item_reference" ? " (send the item itself, or previous_response_id)" : ""),
        error_code::kUnsupportedValue);
  }
}

ojson input_messages(const ojson& input) {
  ojson out = ojson::array();
  if (input.is_string()) {
    out.push_back(ojson{{"role", "user"}, {"content", input}});
  } else if (input.is_array()) {
    for (size_t i = 0; i < input.size(); ++i) add_item(input[i], i, out);
  } else {
    bad("input", "'input' must be a string or a list of input items", error_code::kInvalidType);
  }
  return out;
}

// Function tools {type, name, description, parameters, strict} as chat tools.
ojson chat_tools(const ojson& tools) {
  if (!tools.is_array()) bad("tools", "'tools' must be a list", error_code::kInvalidType);
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = fmt::format("tools[{}]", i);
    const ojson& t = tools[i];
    if (!t.is_object()) bad("tools", at + " must be an object", error_code::kInvalidType);
    const std::string type = type_of(t);
    if (type != "function")
      bad("tools",
          fmt::format("{} is a '{}' tool: halo serves only function tools {{type: \"function\", "
                      "name, parameters}}",
                      at, type),
          error_code::kUnsupportedValue);
    ojson fn = ojson::object();
    for (const char* key : {"name", "description", "parameters", "strict"})
      if (const ojson* v = field(t, key)) fn[key] = *v;
    out.push_back(ojson{{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

ojson chat_tool_choice(const ojson& tc) {
  if (tc.is_string()) return tc;  // "auto", "none", "required": the chat path checks
  if (tc.is_object() && type_of(tc) == "function") {
    if (!field(tc, "name") || !tc["name"].is_string())
      bad("tool_choice", "'tool_choice' of type \"function\" needs a string 'name'",
          error_code::kInvalidType);
    return ojson{{"type", "function"}, {"function", {{"name", tc["name"]}}}};
  }
  bad("tool_choice",
      fmt::format("'tool_choice' must be \"auto\", \"none\", \"required\" or {{\"type\": "
                  "\"function\", \"name\": ...}}, not {}",
                  tc.dump()),
      error_code::kUnsupportedValue);
}

// text.format as the chat request's response_format (null: plain text).
ojson response_format(const ojson& text) {
  if (!text.is_object()) bad("text", "'text' must be an object", error_code::kInvalidType);
  const ojson* format = field(text, "format");
  if (!format) return nullptr;
  const std::string type = format->is_object() ? type_of(*format) : "";
  if (type == "text") return nullptr;
  if (type == "json_object") return ojson{{"type", "json_object"}};
  if (type == "json_schema") {
    ojson schema{{"name", format->value("name", "response")}};
    if (const ojson* s = field(*format, "schema")) schema["schema"] = *s;
    if (const ojson* s = field(*format, "strict")) schema["strict"] = *s;
    return ojson{{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  }
  bad("text", "'text.format.type' must be \"text\", \"json_object\" or \"json_schema\"");
}

// Fields the response repeats, with OpenAI's defaults.
ojson echo_fields(const ojson& in) {
  const std::pair<const char*, ojson> fields[] = {
      {"instructions", nullptr},
      {"max_output_tokens", nullptr},
      {"metadata", ojson::object()},
      {"parallel_tool_calls", true},
      {"previous_response_id", nullptr},
      {"reasoning", ojson{{"effort", nullptr}, {"summary", nullptr}}},
      {"store", true},
      {"temperature", nullptr},
      {"text", ojson{{"format", {{"type", "text"}}}}},
      {"tool_choice", "auto"},
      {"tools", ojson::array()},
      {"top_p", nullptr},
      {"truncation", "disabled"},
      {"user", nullptr},
  };
  ojson echo = ojson::object();
  for (const auto& [key, fallback] : fields) {
    const ojson* v = field(in, key);
    echo[key] = v ? *v : fallback;
  }
  return echo;
}

// Read, honoured or safely ignored; anything else is logged as unknown.
constexpr std::string_view kKnown[] = {"model",
                                       "input",
                                       "instructions",
                                       "previous_response_id",
                                       "max_output_tokens",
                                       "temperature",
                                       "top_p",
                                       "top_k",
                                       "min_p",
                                       "seed",
                                       "repetition_penalty",
                                       "presence_penalty",
                                       "frequency_penalty",
                                       "stream",
                                       "tools",
                                       "tool_choice",
                                       "parallel_tool_calls",
                                       "text",
                                       "store",
                                       "background",
                                       "metadata",
                                       "reasoning",
                                       "truncation",
                                       "user",
                                       "include",
                                       "safety_identifier",
                                       "prompt_cache_key",
                                       "service_tier",
                                       "stream_options",
                                       "conversation",
                                       "prompt"};

void check_refused(const ojson& in) {
  if (const ojson* b = field(in, "background"); b && b->is_boolean() && b->get<bool>())
    bad("background", "halo does not run responses in the background: send background: false",
        error_code::kUnsupportedValue);
  if (field(in, "conversation"))
    bad("conversation", "halo has no Conversations API: use previous_response_id",
        error_code::kUnsupportedParameter);
  if (field(in, "prompt"))
    bad("prompt", "halo has no stored prompt templates: send 'instructions' and 'input'",
        error_code::kUnsupportedParameter);
  if (const ojson* m = field(in, "metadata"); m && !m->is_object())
    bad("metadata", "'metadata' must be an object", error_code::kInvalidType);
  for (auto it = in.begin(); it != in.end(); ++it)
    if (std::find(std::begin(kKnown), std::end(kKnown), it.key()) == std::end(kKnown))
      spdlog::debug("/v1/responses: ignoring unknown field '{}'", it.key());
}

// The earlier conversation of previous_response_id (empty without one).
ojson previous_conversation(const ojson& in, ResponseStore& store) {
  const ojson* prev = field(in, "previous_response_id");
  if (!prev) return ojson::array();
  if (!prev->is_string())
    bad("previous_response_id", "'previous_response_id' must be a string",
        error_code::kInvalidType);
  auto entry = store.get(prev->get<std::string>());
  if (!entry)
    bad("previous_response_id",
        fmt::format("Previous response with id '{}' not found (halo keeps responses in memory, "
                    "for this server's lifetime, with store: true)",
                    prev->get<std::string>()),
        "previous_response_not_found");
  return entry->conversation;
}

}  // namespace

ResponsesRequest responses_to_chat(const std::string& body, ResponseStore& store) {
  const ojson in = parse_ordered_body(body);  // parsed once already, within the depth limit
  check_refused(in);
  ResponsesRequest r;
  r.echo = echo_fields(in);
  if (const ojson* s = field(in, "store")) {
    if (!s->is_boolean()) bad("store", "'store' must be a boolean", error_code::kInvalidType);
    r.store = s->get<bool>();
  }
  r.conversation = previous_conversation(in, store);
  const ojson* input = field(in, "input");
  if (!input) bad("input", "'input' is required", error_code::kMissingParameter);
  for (auto& m : input_messages(*input)) r.conversation.push_back(std::move(m));

  ojson out = ojson::object();
  if (const ojson* m = field(in, "model")) out["model"] = *m;
  ojson messages = ojson::array();
  if (const ojson* ins = field(in, "instructions")) {
    if (!ins->is_string())
      bad("instructions", "'instructions' must be a string", error_code::kInvalidType);
    messages.push_back(ojson{{"role", "system"}, {"content", *ins}});
  }
  for (const auto& m : r.conversation) messages.push_back(m);
  out["messages"] = std::move(messages);
  if (const ojson* t = field(in, "tools")) out["tools"] = chat_tools(*t);
  if (const ojson* tc = field(in, "tool_choice")) out["tool_choice"] = chat_tool_choice(*tc);
  if (const ojson* p = field(in, "parallel_tool_calls")) out["parallel_tool_calls"] = *p;
  if (const ojson* t = field(in, "text"))
    if (ojson f = response_format(*t); !f.is_null()) out["response_format"] = std::move(f);
  if (const ojson* m = field(in, "max_output_tokens")) {
    if (!m->is_number_integer() || m->get<int64_t>() < 1)
      bad("max_output_tokens", "'max_output_tokens' must be a positive integer",
          error_code::kInvalidType);
    out["max_tokens"] = *m;
  }
  for (const char* key : {"temperature", "top_p", "top_k", "min_p", "seed", "repetition_penalty",
                          "presence_penalty", "frequency_penalty", "stream"})
    if (const ojson* v = field(in, key)) out[key] = *v;
  r.chat_body = out.dump();
  return r;
}

namespace {

// One stream event: {"type", "sequence_number", ...data}.
void emit_event(std::string& events, int64_t& seq, const char* type, ojson data) {
  ojson e{{"type", type}, {"sequence_number", seq++}};
  for (auto it = data.begin(); it != data.end(); ++it) e[it.key()] = std::move(it.value());
  write_event(events, type, e);
}

// The output items of one response, built from the chat output's pieces in
// order; an item is finished (its done events) before the next opens.
// `events` (optional) receives the stream events.
class ResponseItems {
 public:
  explicit ResponseItems(int64_t& sequence) : seq_(sequence) {}

  void reasoning(const std::string& s, std::string* events) {
    add_text("reasoning", "reasoning_text", "response.reasoning_text", s, events);
  }
  void text(const std::string& s, std::string* events) {
    add_text("message", "output_text", "response.output_text", s, events);
  }
  void tool_call(const ToolCallDelta& d, std::string* events);
  // Finishes the open item, if any; `status`: "completed" or "incomplete".
  void close(const char* status, std::string* events);

  const ojson& output() const { return output_; }
  // This answer as one chat message (text and calls), for the conversation.
  ojson as_chat_message() const;

 private:
  void emit(std::string* events, const char* type, ojson data);
  void open(ojson fresh, std::string* events);
  void add_text(const char* item_type, const char* part_type, const char* event_prefix,
                const std::string& s, std::string* events);
  size_t index() const { return output_.size() - 1; }
  ojson& item() { return output_.back(); }

  int64_t& seq_;
  ojson output_ = ojson::array();
  bool open_ = false;
  std::string prefix_;  // the open text item's event name prefix
};

void ResponseItems::emit(std::string* events, const char* type, ojson data) {
  if (events) emit_event(*events, seq_, type, std::move(data));
}

void ResponseItems::open(ojson fresh, std::string* events) {
  close("completed", events);
  output_.push_back(std::move(fresh));
  open_ = true;
  emit(events, "response.output_item.added", ojson{{"output_index", index()}, {"item", item()}});
}

void ResponseItems::add_text(const char* item_type, const char* part_type, const char* event_prefix,
                             const std::string& s, std::string* events) {
  if (s.empty()) return;
  if (!open_ || item()["type"] != item_type) {
    const bool message = std::string_view(item_type) == "message";
    ojson it{{"id", random_id(message ? "msg_" : "rs_")}, {"type", item_type}};
    if (message)
      it["role"] = "assistant";
    else
      it["summary"] = ojson::array();
    it["status"] = "in_progress";
    it["content"] = ojson::array();
    open(std::move(it), events);
    prefix_ = event_prefix;
    ojson part{{"type", part_type}, {"text", ""}};
    if (message) part["annotations"] = ojson::array(), part["logprobs"] = ojson::array();
    emit(events, "response.content_part.added",
         ojson{{"item_id", item()["id"]},
               {"output_index", index()},
               {"content_index", 0},
               {"part", part}});
    item()["content"].push_back(std::move(part));
  }
  ojson& part = item()["content"][0];
  part["text"] = part["text"].get<std::string>() + s;
  ojson delta{
      {"item_id", item()["id"]}, {"output_index", index()}, {"content_index", 0}, {"delta", s}};
  if (item()["type"] == "message") delta["logprobs"] = ojson::array();
  emit(events, (prefix_ + ".delta").c_str(), std::move(delta));
}

void ResponseItems::tool_call(const ToolCallDelta& d, std::string* events) {
  if (d.first) {
    open(ojson{{"id", random_id("fc_")},
               {"type", "function_call"},
               {"status", "in_progress"},
               {"arguments", ""},
               {"call_id", random_id("call_")},
               {"name", d.text}},
         events);
    return;
  }
  if (!open_ || item()["type"] != "function_call" || d.text.empty()) return;
  item()["arguments"] = item()["arguments"].get<std::string>() + d.text;
  emit(events, "response.function_call_arguments.delta",
       ojson{{"item_id", item()["id"]}, {"output_index", index()}, {"delta", d.text}});
}

void ResponseItems::close(const char* status, std::string* events) {
  if (!open_) return;
  open_ = false;
  ojson& it = item();
  it["status"] = status;
  if (it["type"] == "function_call") {
    emit(events, "response.function_call_arguments.done",
         ojson{{"item_id", it["id"]},
               {"output_index", index()},
               {"name", it["name"]},
               {"arguments", it["arguments"]}});
  } else {
    const ojson& part = it["content"][0];
    ojson done{{"item_id", it["id"]},
               {"output_index", index()},
               {"content_index", 0},
               {"text", part["text"]}};
    if (it["type"] == "message") done["logprobs"] = ojson::array();
    emit(events, (prefix_ + ".done").c_str(), std::move(done));
    emit(events, "response.content_part.done",
         ojson{{"item_id", it["id"]},
               {"output_index", index()},
               {"content_index", 0},
               {"part", part}});
  }
  emit(events, "response.output_item.done", ojson{{"output_index", index()}, {"item", it}});
}

ojson ResponseItems::as_chat_message() const {
  std::string text;
  ojson calls = ojson::array();
  for (const auto& it : output_) {
    if (it["type"] == "message") text += it["content"][0]["text"].get<std::string>();
    if (it["type"] == "function_call")
      calls.push_back(ojson{{"id", it["call_id"]},
                            {"type", "function"},
                            {"function", {{"name", it["name"]}, {"arguments", it["arguments"]}}}});
  }
  ojson m{{"role", "assistant"}, {"content", text}};
  if (!calls.empty()) m["tool_calls"] = std::move(calls);
  return m;
}

class ResponsesAnswer final : public ChatShape {
 public:
  ResponsesAnswer(ResponsesRequest req, std::string id, std::string model,
                  std::shared_ptr<ResponseStore> store)
      : req_(std::move(req)),
        id_(std::move(id)),
        model_(std::move(model)),
        store_(std::move(store)),
        created_(unix_now()) {}

  const char* route() const override { return "/v1/responses"; }

  void begin(const ChatEnd& so_far, std::string& events) override {
    ojson r = response("in_progress", so_far);
    r["usage"] = nullptr;
    emit(events, "response.created", ojson{{"response", r}});
    emit(events, "response.in_progress", ojson{{"response", r}});
  }

  void add(const ChatDelta& d, std::string* events) override {
    items_.reasoning(d.reasoning, events);
    items_.text(d.content, events);
    for (const auto& t : d.tool_calls) items_.tool_call(t, events);
  }

  void end(const ChatEnd& e, std::string& events) override {
    ojson r = finish(e, &events);
    const std::string status = r["status"].get<std::string>();
    emit(events, status == "completed" ? "response.completed" : "response.incomplete",
         ojson{{"response", std::move(r)}});
  }

  ojson body(const ChatEnd& e) override { return finish(e, nullptr); }

  ojson error_object(int status, const std::string& message) const override {
    return serve::error_object(status, message);
  }

  void error_event(int status, const std::string& message, std::string& events) override {
    const char* code = status == 503 ? "server_unavailable" : "server_error";
    emit(events, "error", ojson{{"code", code}, {"message", message}, {"param", nullptr}});
    ojson r = response("failed", ChatEnd{});
    r["error"] = ojson{{"code", code}, {"message", message}};
    emit(events, "response.failed", ojson{{"response", std::move(r)}});
  }

 private:
  void emit(std::string& events, const char* type, ojson data) {
    emit_event(events, seq_, type, std::move(data));
  }

  // The finished response, stored when asked.
  ojson finish(const ChatEnd& e, std::string* events) {
    const bool cut = e.finish && std::string_view(e.finish) == "length";
    items_.close(cut ? "incomplete" : "completed", events);
    ojson r = response(cut ? "incomplete" : "completed", e);
    if (cut) r["incomplete_details"] = ojson{{"reason", "max_output_tokens"}};
    if (req_.store && store_) {
      ojson conversation = req_.conversation;
      conversation.push_back(items_.as_chat_message());
      store_->put(id_, ResponseStore::Entry{r, std::move(conversation)});
    }
    return r;
  }

  ojson response(const char* status, const ChatEnd& e) const {
    ojson r{{"id", id_},        {"object", "response"},     {"created_at", created_},
            {"status", status}, {"error", nullptr},         {"incomplete_details", nullptr},
            {"model", model_},  {"output", items_.output()}};
    for (auto it = req_.echo.begin(); it != req_.echo.end(); ++it) r[it.key()] = it.value();
    r["usage"] = ojson{{"input_tokens", e.prompt_tokens},
                       {"input_tokens_details", {{"cached_tokens", 0}}},
                       {"output_tokens", e.completion_tokens},
                       {"output_tokens_details", {{"reasoning_tokens", 0}}},
                       {"total_tokens", e.prompt_tokens + e.completion_tokens}};
    return r;
  }

  ResponsesRequest req_;
  std::string id_, model_;
  std::shared_ptr<ResponseStore> store_;
  int64_t created_;
  int64_t seq_ = 0;
  ResponseItems items_{seq_};
};

}  // namespace

std::unique_ptr<ChatShape> responses_answer(ResponsesRequest req, std::string id, std::string model,
                                            std::shared_ptr<ResponseStore> store) {
  return std::make_unique<ResponsesAnswer>(std::move(req), std::move(id), std::move(model),
                                           std::move(store));
}

}  // namespace halo::serve
