#pragma once
// Tool calls in a model's free-form output (tool_choice "auto"), as vLLM's
// --tool-call-parser NAME reads them:
//   - "hermes" (Hermes 2 Pro, Qwen2.5, Qwen3): any number of
//     <tool_call>{"name": N, "arguments": {...}}</tool_call>, with text before,
//     between and after them as content.
//   - "llama3_json" (Llama 3.1 / 3.2 JSON calls): only when the output starts
//     (after whitespace) with an optional <|python_tag|> and a
//     {"name": N, "parameters"|"arguments": {...}} object; several are joined
//     by ';'. Anything else is content.
//   - "mistral": [TOOL_CALLS] followed by a JSON array of
//     {"name": N, "arguments": {...}} (Mistral 7B v0.3 and other pre-v11
//     tokenizers), or by N{...} / N[ARGS]{...} (v11 / v13 tokenizers), each
//     call then behind its own [TOOL_CALLS].
//   - "pythonic" (Llama 3.2 / 4, ToolACE): the output (after whitespace) is a
//     Python list of calls with keyword arguments, [f(a="x", b=[1, None]), g()];
//     literal arguments (str, int, float, True/False/None, list, tuple, dict)
//     become a JSON object.
// For the JSON formats a call's `arguments` is the model's own JSON text of
// the arguments object, verbatim; pythonic arguments are serialised as
// Python's json.dumps writes them ({"a": "x", "b": [1, null]}).
//
// Streaming: feed() takes the text in any pieces (single bytes, halves of a
// UTF-8 character or of a marker) and returns what they decide. Text that could
// still turn out to be markup is held back, so no part of a parsed call's markup
// ever reaches `content`; content and argument fragments never end inside a
// UTF-8 character. For each call the first delta carries its complete name,
// the following ones fragments of its arguments, which concatenate to exactly
// calls()[index].arguments. The same text gives the same calls and content
// however it is split (the non-streamed answer is feed(all) + finish()).
//
// Text that breaks a format is never an error: the call it was in (from its
// first byte, markup included) and everything after it become content, and
// parsing stops. The same holds for a call still open when generation ends
// (finish()); a hermes call whose JSON object is complete but whose
// </tool_call> never came is a call (as in vLLM). Such a call leaves calls();
// when its name had already been sent, a streamed response has carried its
// start (a call can only be the last one streamed).
//
// Pure; a ToolCallParser is a plain value used by one thread at a time.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "serve/tool_choice.h"

namespace halo::serve {

// What one feed() or finish() decides.
struct ToolParseDelta {
  std::string content;                    // plain text, in order
  std::vector<ToolCallDelta> tool_calls;  // names and argument fragments, in order
  bool empty() const { return content.empty() && tool_calls.empty(); }
};

// Reads one choice's generated text. make() names the format.
class ToolCallParser {
 public:
  // "hermes", "llama3_json", "mistral" or "pythonic"; a halo::Error naming
  // the known ones otherwise.
  static std::unique_ptr<ToolCallParser> make(std::string_view name);
  static const std::vector<std::string>& names();

  virtual ~ToolCallParser() = default;
  ToolCallParser(const ToolCallParser&) = delete;
  ToolCallParser& operator=(const ToolCallParser&) = delete;

  // The next piece of generated text.
  ToolParseDelta feed(std::string_view text);
  // The end of generation: what was held back, an unfinished call as content.
  // Call once, after the last feed().
  ToolParseDelta finish();
  // The calls so far (the last one may still be growing).
  const std::vector<ToolCall>& calls() const { return calls_; }

 protected:
  ToolCallParser() = default;
  virtual void step(char c) = 0;  // one byte of output
  virtual void end() = 0;         // generation ended

  // For the formats: text decided to be content; a call's start, with its
  // name; more of the last call's arguments; the last call taken back (its
  // text then goes to content).
  void content(std::string_view s) { content_ += s; }
  void start_call(std::string name);
  void arguments(std::string_view s);
  void drop_call();

 private:
  ToolParseDelta take(bool all);

  std::vector<ToolCall> calls_;
  std::string content_;                // decided content not yet returned
  std::string args_;                   // the last call's argument bytes not yet returned
  std::vector<ToolCallDelta> deltas_;  // decided deltas not yet returned
};

// The parser a chat template's tool-call format implies: "hermes" for
// <tool_call>, "mistral" for [TOOL_CALLS], "pythonic" for a Python list of
// calls ("[func_name1(params_name1=..."), "llama3_json" for <|python_tag|> or
// Llama 3.1's JSON {"name": ..., "parameters": ...} under the ipython role;
// "" when it shows none.
std::string tool_parser_for_template(std::string_view chat_template);

}  // namespace halo::serve
