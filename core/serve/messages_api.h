#pragma once
// Anthropic's Messages API (POST /v1/messages) as a codec over the chat
// completions path: the request becomes the OpenAI chat request halo already
// serves (one path for rendering, sampling and tool parsing), and the chat
// choice's output (ChatOutput) becomes Anthropic's content blocks, whole or
// as Anthropic's SSE events. Errors take Anthropic's shape
// {"type": "error", "error": {"type", "message"}}.
//
// Pure functions, and a ChatShape (chat_shape.h has its threading rule).
#include <memory>
#include <string>

#include "serve/api_common.h"
#include "serve/chat_shape.h"

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

// The answer in Anthropic's shape: a message whose content blocks are
// built from the chat output's pieces in order (reasoning: thinking blocks,
// with an empty signature since halo signs nothing; text: text blocks; a
// tool call: a tool_use block whose input is the arguments' JSON), streamed
// as message_start, content_block_start/delta/stop, message_delta and
// message_stop. `id` is the message's ("msg_...").
std::unique_ptr<ChatShape> anthropic_message(std::string id, std::string model);

}  // namespace halo::serve
