#pragma once
// A conversation with tools, prepared for the chat template as vLLM prepares
// it, so that the messages OpenAI's SDKs and the Agents SDK send render with
// the model's own template:
//   - an assistant message's tool_calls[j].function.arguments given as JSON
//     text (as the API carries it) becomes the object it encodes (text that
//     encodes no object stays text); JSON text nested `max_depth` levels or
//     deeper is a 400 naming the field, as a body that deep is;
//   - an assistant `content` of null beside tool_calls becomes "";
//   - a `tool` message must carry a string `tool_call_id`.
// A 400 naming messages[i]... for a malformed tool call or tool message.
// Pure; any thread.
#include "serve/api_common.h"

namespace halo::serve {

void prepare_tool_messages(ojson& messages, int max_depth);

}  // namespace halo::serve
