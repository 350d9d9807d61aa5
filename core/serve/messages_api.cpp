#include "serve/messages_api.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "common/json_depth.h"

namespace halo::serve {

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message,
                      const char* code = error_code::kInvalidValue) {
  throw ApiError(400, message, param, code);
}

std::string block_type(const ojson& block, const std::string& at) {
  if (!block.is_object() || !block.contains("type") || !block["type"].is_string())
    bad(at, at + " must be an object with a string 'type'", error_code::kInvalidType);
  return block["type"].get<std::string>();
}

// A text block's text (400 when it has none).
std::string block_text(const ojson& block, const std::string& at) {
  if (!block.contains("text") || !block["text"].is_string())
    bad(at, at + ".text must be a string", error_code::kInvalidType);
  return block["text"].get<std::string>();
}

// A string, or a list of text blocks (joined by newlines): system and tool_result content.
std::string text_of(const ojson& content, const std::string& at) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    bad(at, at + " must be a string or a list of text blocks", error_code::kInvalidType);
  std::string out;
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string here = fmt::format("{}[{}]", at, k);
    const std::string type = block_type(content[k], here);
    if (type != "text")
      bad(here, fmt::format("{} is a '{}' block: halo takes only text blocks here", here, type),
          error_code::kUnsupportedValue);
    if (!out.empty()) out += '\n';
    out += block_text(content[k], here);
  }
  return out;
}

// One Anthropic message as OpenAI chat messages, appended to `out`.
void add_message(const ojson& m, size_t i, ojson& out) {
  const std::string at = fmt::format("messages[{}]", i);
  if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
    bad("messages", at + " must be an object with a string 'role'", error_code::kInvalidType);
  const std::string role = m["role"].get<std::string>();
  if (role != "user" && role != "assistant")
    bad("messages",
        fmt::format(
            "{}.role must be \"user\" or \"assistant\" (the system prompt goes in 'system')", at));
  if (!m.contains("content"))
    bad("messages", at + ".content is required", error_code::kMissingParameter);
  const ojson& content = m["content"];
  if (content.is_string()) {
    out.push_back(ojson{{"role", role}, {"content", content}});
    return;
  }
  if (!content.is_array())
    bad("messages", at + ".content must be a string or a list of content blocks",
        error_code::kInvalidType);
  std::string text;
  ojson calls = ojson::array();
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string here = fmt::format("{}.content[{}]", at, k);
    const ojson& b = content[k];
    const std::string type = block_type(b, here);
    if (type == "text") {
      if (!text.empty()) text += '\n';
      text += block_text(b, here);
    } else if (type == "tool_use" && role == "assistant") {
      if (!b.contains("id") || !b["id"].is_string() || !b.contains("name") ||
          !b["name"].is_string())
        bad("messages", here + " must have a string 'id' and 'name'", error_code::kInvalidType);
      const ojson input = b.contains("input") ? b["input"] : ojson::object();
      if (!input.is_object())
        bad("messages", here + ".input must be an object", error_code::kInvalidType);
      calls.push_back(ojson{{"id", b["id"]},
                            {"type", "function"},
                            {"function", {{"name", b["name"]}, {"arguments", input.dump()}}}});
    } else if (type == "tool_result" && role == "user") {
      if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string())
        bad("messages", here + ".tool_use_id must be a string", error_code::kInvalidType);
      std::string result = b.contains("content") && !b["content"].is_null()
                               ? text_of(b["content"], here + ".content")
                               : "";
      if (b.contains("is_error") && b["is_error"].is_boolean() && b["is_error"].get<bool>())
        result = "Error: " + result;
      // OpenAI's tool messages follow the assistant's calls: they come before the user's text.
      out.push_back(
          ojson{{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", result}});
    } else if (role == "assistant" && (type == "thinking" || type == "redacted_thinking")) {
      // Earlier reasoning is not sent back to the model.
    } else {
      bad("messages",
          fmt::format("{} is a '{}' block, which halo does not take in a {} message", here, type,
                      role),
          error_code::kUnsupportedValue);
    }
  }
  if (role == "assistant") {
    ojson msg{{"role", "assistant"}, {"content", text}};
    if (!calls.empty()) msg["tool_calls"] = std::move(calls);
    out.push_back(std::move(msg));
  } else if (!text.empty() || content.empty()) {
    out.push_back(ojson{{"role", "user"}, {"content", text}});
  }
}

ojson chat_tools(const ojson& tools) {
  if (!tools.is_array()) bad("tools", "'tools' must be a list", error_code::kInvalidType);
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = fmt::format("tools[{}]", i);
    const ojson& t = tools[i];
    if (!t.is_object()) bad("tools", at + " must be an object", error_code::kInvalidType);
    if (t.contains("type") && !t["type"].is_null() && t["type"] != "custom")
      bad("tools",
          fmt::format("{} is a '{}' server tool: halo serves only client tools {{name, "
                      "description, input_schema}}",
                      at, t["type"].is_string() ? t["type"].get<std::string>() : t["type"].dump()),
          error_code::kUnsupportedValue);
    if (!t.contains("name") || !t["name"].is_string())
      bad("tools", at + ".name must be a string", error_code::kInvalidType);
    if (!t.contains("input_schema") || !t["input_schema"].is_object())
      bad("tools", at + ".input_schema must be a JSON schema object", error_code::kInvalidType);
    ojson fn{{"name", t["name"]}};
    if (t.contains("description") && !t["description"].is_null())
      fn["description"] = t["description"];
    fn["parameters"] = t["input_schema"];
    out.push_back(ojson{{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

void add_tool_choice(const ojson& tc, ojson& out) {
  if (!tc.is_object() || !tc.contains("type") || !tc["type"].is_string())
    bad("tool_choice", "'tool_choice' must be an object with a string 'type'",
        error_code::kInvalidType);
  const std::string type = tc["type"].get<std::string>();
  if (type == "auto") {
    out["tool_choice"] = "auto";
  } else if (type == "any") {
    out["tool_choice"] = "required";
  } else if (type == "none") {
    out["tool_choice"] = "none";
  } else if (type == "tool") {
    if (!tc.contains("name") || !tc["name"].is_string())
      bad("tool_choice", "'tool_choice' of type \"tool\" needs a string 'name'",
          error_code::kInvalidType);
    out["tool_choice"] = ojson{{"type", "function"}, {"function", {{"name", tc["name"]}}}};
  } else {
    bad("tool_choice",
        fmt::format(
            "'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\", not \"{}\"",
            type));
  }
  if (tc.contains("disable_parallel_tool_use") && tc["disable_parallel_tool_use"].is_boolean() &&
      tc["disable_parallel_tool_use"].get<bool>())
    out["parallel_tool_calls"] = false;
}

}  // namespace

std::string messages_to_chat_body(const std::string& body) {
  const ojson in = parse_ordered_body(body);  // parsed once already, within the depth limit
  ojson out = ojson::object();
  if (!in.contains("model") || !in["model"].is_string())
    bad("model", "'model' (a string) is required", error_code::kMissingParameter);
  out["model"] = in["model"];
  if (!in.contains("max_tokens") || in["max_tokens"].is_null())
    bad("max_tokens", "'max_tokens' is required", error_code::kMissingParameter);
  if (!in["max_tokens"].is_number_integer() || in["max_tokens"].get<int64_t>() < 1)
    bad("max_tokens", "'max_tokens' must be a positive integer", error_code::kInvalidType);
  if (!in.contains("messages"))
    bad("messages", "'messages' is required", error_code::kMissingParameter);
  const ojson& messages = in["messages"];
  if (!messages.is_array())
    bad("messages", "'messages' must be a list of messages", error_code::kInvalidType);
  ojson chat = ojson::array();
  if (in.contains("system") && !in["system"].is_null())
    chat.push_back(ojson{{"role", "system"}, {"content", text_of(in["system"], "system")}});
  for (size_t i = 0; i < messages.size(); ++i) add_message(messages[i], i, chat);
  if (messages.empty()) chat = ojson::array();  // the chat path's 400: 'messages' must be non-empty
  // A final assistant turn is a prefill: the answer continues it.
  const bool prefill =
      !chat.empty() && chat.back()["role"] == "assistant" && !chat.back().contains("tool_calls");
  out["messages"] = std::move(chat);
  if (prefill) out["continue_final_message"] = true;
  if (in.contains("tools") && !in["tools"].is_null()) out["tools"] = chat_tools(in["tools"]);
  if (in.contains("tool_choice") && !in["tool_choice"].is_null())
    add_tool_choice(in["tool_choice"], out);
  out["max_tokens"] = in["max_tokens"];
  if (in.contains("stop_sequences") && !in["stop_sequences"].is_null()) {
    const ojson& s = in["stop_sequences"];
    if (!s.is_array() ||
        !std::all_of(s.begin(), s.end(), [](const ojson& x) { return x.is_string(); }))
      bad("stop_sequences", "'stop_sequences' must be a list of strings", error_code::kInvalidType);
    out["stop"] = s;
  }
  for (const char* key : {"temperature", "top_p", "top_k", "stream"})
    if (in.contains(key)) out[key] = in[key];
  if (in.contains("metadata") && !in["metadata"].is_null() && !in["metadata"].is_object())
    bad("metadata", "'metadata' must be an object", error_code::kInvalidType);
  return out.dump();
}

const char* anthropic_error_type(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 405:
      return "invalid_request_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
    case 529:
      return "overloaded_error";
    default:
      return status >= 400 && status < 500 ? "invalid_request_error" : "api_error";
  }
}

ojson anthropic_error_object(int status, const std::string& message) {
  return ojson{{"type", "error"},
               {"error", {{"type", anthropic_error_type(status)}, {"message", message}}}};
}

HttpResponse anthropic_error(const ApiError& e) {
  HttpResponse r;
  r.status = e.status();
  r.body = dump(anthropic_error_object(e.status(), e.what()));
  return r;
}

namespace {

// The content blocks of one message, built from the chat output's pieces in
// order; a block is closed before the next opens. `events` (optional)
// receives content_block_start/delta/stop.
class MessageBlocks {
 public:
  void thinking(const std::string& s, std::string* events);
  void text(const std::string& s, std::string* events);
  void tool_call(const ToolCallDelta& d, std::string* events);
  void close(std::string* events);  // the open block, if any
  // The blocks so far (the open one's tool input not yet parsed).
  const ojson& content() const { return content_; }
  bool has_tool_use() const { return has_tool_use_; }

 private:
  void open(ojson block, std::string* events);
  // Adds `s` to the open block of `type` (opening one), whose text is `field`.
  void add_text(const char* type, const char* field, const char* delta_type, const std::string& s,
                std::string* events);

  ojson content_ = ojson::array();
  bool open_ = false;
  bool has_tool_use_ = false;
  std::string args_;  // the open tool_use block's input JSON so far
};

void MessageBlocks::open(ojson block, std::string* events) {
  close(events);
  if (events)
    write_event(
        *events, "content_block_start",
        ojson{
            {"type", "content_block_start"}, {"index", content_.size()}, {"content_block", block}});
  content_.push_back(std::move(block));
  open_ = true;
}

void MessageBlocks::add_text(const char* type, const char* field, const char* delta_type,
                             const std::string& s, std::string* events) {
  if (s.empty()) return;
  if (!open_ || content_.back()["type"] != type) {
    ojson block{{"type", type}, {field, ""}};
    if (std::string_view(type) == "thinking") block["signature"] = "";
    open(std::move(block), events);
  }
  content_.back()[field] = content_.back()[field].get<std::string>() + s;
  if (events)
    write_event(*events, "content_block_delta",
                ojson{{"type", "content_block_delta"},
                      {"index", content_.size() - 1},
                      {"delta", {{"type", delta_type}, {field, s}}}});
}

void MessageBlocks::thinking(const std::string& s, std::string* events) {
  add_text("thinking", "thinking", "thinking_delta", s, events);
}

void MessageBlocks::text(const std::string& s, std::string* events) {
  add_text("text", "text", "text_delta", s, events);
}

void MessageBlocks::tool_call(const ToolCallDelta& d, std::string* events) {
  if (d.first) {
    open(ojson{{"type", "tool_use"},
               {"id", random_id("toolu_")},
               {"name", d.text},
               {"input", ojson::object()}},
         events);
    has_tool_use_ = true;
    args_.clear();
    return;
  }
  if (!open_ || content_.back()["type"] != "tool_use" || d.text.empty()) return;
  args_ += d.text;
  if (events)
    write_event(*events, "content_block_delta",
                ojson{{"type", "content_block_delta"},
                      {"index", content_.size() - 1},
                      {"delta", {{"type", "input_json_delta"}, {"partial_json", d.text}}}});
}

void MessageBlocks::close(std::string* events) {
  if (!open_) return;
  open_ = false;
  ojson& b = content_.back();
  if (b["type"] == "tool_use") {
    // The arguments as generated; a call cut off (max_tokens), or nested past
    // any request's limit, keeps an empty input.
    ojson input;
    try {
      input = parse_json_bounded<ojson>(args_, kDefaultMaxJsonDepth, false);
    } catch (const JsonTooDeep&) {
    }
    b["input"] = input.is_object() ? std::move(input) : ojson::object();
    args_.clear();
  }
  if (events)
    write_event(*events, "content_block_stop",
                ojson{{"type", "content_block_stop"}, {"index", content_.size() - 1}});
}

class AnthropicMessage final : public ChatShape {
 public:
  AnthropicMessage(std::string id, std::string model)
      : id_(std::move(id)), model_(std::move(model)) {}

  const char* route() const override { return "/v1/messages"; }

  void begin(const ChatEnd& so_far, std::string& events) override {
    ojson msg = head();
    msg["content"] = ojson::array();
    msg["stop_reason"] = nullptr;
    msg["stop_sequence"] = nullptr;
    msg["usage"] = {{"input_tokens", so_far.prompt_tokens}, {"output_tokens", 0}};
    write_event(events, "message_start", ojson{{"type", "message_start"}, {"message", msg}});
  }

  void add(const ChatDelta& d, std::string* events) override {
    blocks_.thinking(d.reasoning, events);
    blocks_.text(d.content, events);
    for (const auto& t : d.tool_calls) blocks_.tool_call(t, events);
  }

  void end(const ChatEnd& e, std::string& events) override {
    blocks_.close(&events);
    auto [reason, seq] = stop(e);
    write_event(events, "message_delta",
                ojson{{"type", "message_delta"},
                      {"delta", {{"stop_reason", reason}, {"stop_sequence", seq}}},
                      {"usage", {{"output_tokens", e.completion_tokens}}}});
    write_event(events, "message_stop", ojson{{"type", "message_stop"}});
  }

  ojson body(const ChatEnd& e) override {
    blocks_.close(nullptr);
    auto [reason, seq] = stop(e);
    ojson body = head();
    body["content"] = blocks_.content();
    body["stop_reason"] = reason;
    body["stop_sequence"] = seq;
    body["usage"] = {{"input_tokens", e.prompt_tokens}, {"output_tokens", e.completion_tokens}};
    return body;
  }

  ojson error_object(int status, const std::string& message) const override {
    return anthropic_error_object(status, message);
  }

  void error_event(int status, const std::string& message, std::string& events) override {
    write_event(events, "error", anthropic_error_object(status, message));
  }

 private:
  ojson head() const {
    return ojson{{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", model_}};
  }

  // stop_reason and stop_sequence.
  std::pair<ojson, ojson> stop(const ChatEnd& e) const {
    if (!e.finish) return {nullptr, nullptr};
    if (std::string_view(e.finish) == "length") return {"max_tokens", nullptr};
    if (!e.stop_sequence.empty()) return {"stop_sequence", e.stop_sequence};
    return {blocks_.has_tool_use() ? "tool_use" : "end_turn", nullptr};
  }

  std::string id_, model_;
  MessageBlocks blocks_;
};

}  // namespace

std::unique_ptr<ChatShape> anthropic_message(std::string id, std::string model) {
  return std::make_unique<AnthropicMessage>(std::move(id), std::move(model));
}

}  // namespace halo::serve
