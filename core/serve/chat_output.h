#pragma once
// What one chat choice's generated text becomes in the response, fed in the
// pieces the engine streams (the non-streamed answer is feed(all) + finish()):
//   1. reasoning: with the model's --reasoning-parser, <think> text goes to
//      `reasoning` (reasoning_parser.h); the rest is the answer;
//   2. in the answer, tool calls: a forced tool_choice's calls
//      (ToolCallScanner, tool_choice.h), or with tool_choice auto, tools in the
//      request and a --tool-call-parser (the model's), calls parsed out of free
//      text (tool_parsers.h), the text around them being content; with
//      parallel_tool_calls false only the first parsed call is kept, as vLLM
//      does (a forced choice's grammar allows only one then);
//   3. everything else is `content`.
// With none of these the text passes through as content unchanged.
// A ChatOutput is a plain value used by one thread at a time.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "serve/reasoning_parser.h"
#include "serve/tool_choice.h"
#include "serve/tool_parsers.h"

namespace halo::serve {

struct ChatDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
};

// Adds `more` to the end of `d`.
void append(ChatDelta& d, ChatDelta&& more);

class ChatOutput {
 public:
  // `tool_parser`, `reasoning_parser`: the model's ("" for none). A forced
  // tool choice's output is all answer, and so is a `constrained` one (guided
  // decoding holding from the first token, when the tokenizer has no </think>
  // token for the engine's reasoning gate) unless it opens with <think> itself
  // (so deepseek_r1, whose prompt opens the reasoning, is off for it).
  ChatOutput(const ToolChoice& tc, const std::string& tool_parser,
             const std::string& reasoning_parser, bool constrained);

  ChatDelta feed(std::string_view text);
  ChatDelta finish();
  // The calls made so far (with parallel_tool_calls false, the first only).
  std::vector<ToolCall> calls() const;
  // Whether the text is only ever content (then feed() returns it as it came).
  bool passthrough() const { return !reasoning_ && !scanner_ && !parser_; }
  // OpenAI's finish_reason: "tool_calls" when the engine stopped on its own
  // after calls (tool_choice "required" or auto-parsed calls); otherwise the engine's.
  const char* finish_reason(const char* engine_reason) const;

 private:
  void answer(std::string_view text, ChatDelta& d);

  ToolChoice::Mode mode_;
  std::unique_ptr<ReasoningParser> reasoning_;
  std::unique_ptr<ToolCallScanner> scanner_;  // forced tool choice
  std::unique_ptr<ToolCallParser> parser_;    // auto
  bool one_call_ = false;                     // auto with parallel_tool_calls false
};

}  // namespace halo::serve
