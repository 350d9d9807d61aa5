#pragma once
// OpenAI's Responses API (POST /v1/responses, GET and DELETE
// /v1/responses/{id}) as a codec over the chat completions path, as
// messages_api.h does for Anthropic's: the request becomes a chat request
// (instructions, the stored conversation of previous_response_id, then the
// input items), and the chat choice's output (ChatOutput) becomes output
// items (reasoning, message, function_call), whole or as the typed SSE
// events of a response stream. docs/tools.md has what is taken and what is
// refused.
//
// Pure functions, and a ChatShape (chat_shape.h has its threading rule).
#include <memory>
#include <string>

#include "serve/api_common.h"
#include "serve/chat_shape.h"
#include "serve/response_store.h"

namespace halo::serve {

struct ResponsesRequest {
  std::string chat_body;  // the chat completions request (JSON text)
  ojson conversation;     // chat messages: the earlier turns and this input, without instructions
  ojson echo;             // the request's settings as the response object repeats them
  bool store = true;      // keep the answer for previous_response_id and GET
};

// The chat request for a Responses request `body` (its text, already
// validated as a JSON object); `store` resolves previous_response_id. A 400
// naming the field for what is malformed or what halo cannot honour (image
// inputs, hosted tools, background mode, ...).
ResponsesRequest responses_to_chat(const std::string& body, ResponseStore& store);

// The answer in the Responses shape: a response object whose output items
// are built from the chat output's pieces in order, streamed as
// response.created, response.in_progress, output_item.added, content_part
// and text/argument delta and done events, then response.completed (or
// response.incomplete when max_output_tokens cut it). Every event carries a
// sequence_number. With req.store the finished answer goes into `store`.
std::unique_ptr<ChatShape> responses_answer(ResponsesRequest req, std::string id, std::string model,
                                            std::shared_ptr<ResponseStore> store);

}  // namespace halo::serve
