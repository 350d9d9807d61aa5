#pragma once
// A chat choice answered in another API's shape: Anthropic's Messages
// (messages_api.h) and OpenAI's Responses (responses_api.h). Both take a
// request that halo turns into a chat completions request (one path for
// rendering, sampling, tool parsing), serve one choice, and answer with typed
// output blocks or items, whole or as named SSE events. The chat frontend's
// job (openai_server.cpp) reads the choice's text with ChatOutput and hands
// each ChatDelta to the shape; the shape owns everything the answer says.
//
// Threads: a shape is built on the preprocessing thread, then used by the
// stream pump thread only (one call at a time).
#include <cstdint>
#include <string>

#include "serve/api_common.h"
#include "serve/chat_output.h"

namespace halo::serve {

// How far a generation got, as the shapes report it.
struct ChatEnd {
  const char* finish = nullptr;  // finish_name(): "stop", "length", ...; null while running
  std::string stop_sequence;     // the request's stop string that ended it ("" for none)
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

class ChatShape {
 public:
  virtual ~ChatShape() = default;
  // The route, for the log of fields halo ignored.
  virtual const char* route() const = 0;
  // A stream's opening events (`so_far`: the prompt's size only).
  virtual void begin(const ChatEnd& so_far, std::string& events) = 0;
  // More of the choice's output; `events` is null when the answer is not streamed.
  virtual void add(const ChatDelta& d, std::string* events) = 0;
  // A stream's closing events after the last add().
  virtual void end(const ChatEnd& e, std::string& events) = 0;
  // The whole answer after the last add().
  virtual ojson body(const ChatEnd& e) = 0;
  // An error before or instead of the answer, and one during a stream.
  virtual ojson error_object(int status, const std::string& message) const = 0;
  virtual void error_event(int status, const std::string& message, std::string& events) = 0;
};

// One SSE event with a name: "event: <type>\ndata: <json>\n\n".
void write_event(std::string& out, const char* type, const ojson& data);

}  // namespace halo::serve
