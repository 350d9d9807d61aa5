#pragma once
// Anthropic's Messages API (POST /v1/messages) as a codec over the chat
// completions path: the request becomes the OpenAI chat request halo already
// serves (one path for rendering, sampling and tool parsing), and the chat
// choice's output (ChatOutput) becomes Anthropic's content blocks, whole or
// as Anthropic's SSE events. Errors take Anthropic's shape
// {"type": "error", "error": {"type", "message"}}.
//
// Pure functions; MessageBlocks is a plain value used by one thread at a time.
#include <string>
#include <vector>

#include "serve/api_common.h"
#include "serve/tool_choice.h"

namespace halo::serve {

// The OpenAI chat completions body (JSON text, keys in the client's order)
// for an Anthropic Messages request `body` (the request's text, already
// validated as a JSON object). A 400 naming the field for what is malformed
// or what halo cannot honour (image blocks, server tools, ...).
std::string messages_to_chat_body(const std::string& body);

// Anthropic's error type for an HTTP status (invalid_request_error,
// authentication_error, not_found_error, overloaded_error, api_error, ...).
const char* anthropic_error_type(int status);
// {"type": "error", "error": {"type", "message"}}.
ojson anthropic_error_object(int status, const std::string& message);
HttpResponse anthropic_error(const ApiError& e);

// The content blocks of one message, built from the chat output's pieces in
// order: reasoning opens (or continues) a thinking block (with an empty
// signature: halo signs nothing), text a text block, a tool call's first delta
// opens a tool_use block and its fragments are its input's JSON. A block is
// closed before the next opens. `events` (optional) receives Anthropic's
// stream events (content_block_start/delta/stop) as "event: ...\ndata: ...\n\n".
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

// One SSE event in Anthropic's framing.
void write_event(std::string& out, const char* type, const ojson& data);

}  // namespace halo::serve
