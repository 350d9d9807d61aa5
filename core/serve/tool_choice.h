#pragma once
// OpenAI's tool_choice "required" and a named function on chat completions,
// enforced by guided decoding (as vLLM does it):
//   - named {"type": "function", "function": {"name": N}}: the output is the
//     JSON of N's `parameters` schema; it is the call's `arguments`.
//   - "required": the output is a JSON array of {"name": N, "parameters": {...}}
//     (at least one; one when parallel_tool_calls is false), each a tool's call.
// The generated text becomes message.tool_calls, or streamed delta.tool_calls,
// through ToolCallScanner: the same text gives the same calls however it is
// split, so the concatenated argument fragments equal the non-streamed arguments.
// "none" and "auto" leave the output free (no tool-call parsing).
//
// Pure functions; ToolCallScanner is a plain value used by one thread at a time.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/async_engine.h"
#include "serve/api_common.h"

namespace halo::serve {

struct ToolChoice {
  enum class Mode {
    kFree,      // absent, "none" or "auto": free text
    kNamed,     // one call of `name`
    kRequired,  // an array of calls of any of `tools`
  };
  Mode mode = Mode::kFree;
  std::string name;                 // kNamed
  json tools;                       // kNamed, kRequired: the request's (validated) tools
  bool parallel_tool_calls = true;  // kRequired: false allows one call only
  bool none = false;                // "none": the model is not to call tools
  bool has_tools = false;           // the request lists tools
  bool forced() const { return mode != Mode::kFree; }
  // tool_choice auto (or absent) with tools: calls are parsed out of free text.
  bool auto_parse() const { return mode == Mode::kFree && !none && has_tools; }
};

// Reads tool_choice and parallel_tool_calls (`tools` is already validated by
// validate_tools). A 400 naming `tool_choice` when it is malformed or names no
// known function, naming `tools` when "required"/named come without tools.
ToolChoice parse_tool_choice(Fields& f);

// vLLM's schema of "required": {"type": "array", "minItems": 1, ["maxItems": 1,]
// "items": {"anyOf": [{"type": "object", "properties": {"name": {"enum": [N]},
// "parameters": P}, "required": ["name", "parameters"], "additionalProperties": false},
// ...]}}, P a tool's parameters ({"type": "object"} when absent).
json required_tools_schema(const json& tools, bool parallel_tool_calls);

// Constrains the output to a forced tool choice (nothing for kFree): a 400
// when another constraint (response_format, guided_*) is set too ("cannot
// both"), or naming tools[i].function.parameters when its schema is refused.
void constrain_to_tool_choice(const ToolChoice& tc, engine::RequestOptions& o);

// One call as the response carries it.
struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text, exactly as generated
};

// A piece of a streamed call: its first (with the complete name), then
// fragments of its arguments.
struct ToolCallDelta {
  size_t index = 0;    // the call's place in tool_calls
  bool first = false;  // true: `text` is the name; false: an arguments fragment
  std::string text;
};

// Reads a forced tool choice's generated text incrementally, in any pieces.
// Named: the whole text is the arguments of one call. Required: the text is
// the schema's array (compact JSON, optional whitespace anywhere between
// tokens); a call starts once its name string is complete, and its
// "parameters" value is passed on verbatim as argument fragments. Keys other
// than name/parameters are skipped; text that breaks the shape (which the
// constraint prevents) ends the scan.
class ToolCallScanner {
 public:
  explicit ToolCallScanner(const ToolChoice& tc);

  // The deltas `text` completes, in order; fragments of one call in one feed
  // come as one delta.
  std::vector<ToolCallDelta> feed(std::string_view text);
  // The calls started so far, with their arguments so far.
  const std::vector<ToolCall>& calls() const { return calls_; }

 private:
  enum class State {
    kArrayOpen,
    kItemOpen,
    kAfterItem,
    kKeyOpen,
    kKey,
    kColon,
    kValueOpen,
    kName,
    kValue,
    kAfterValue,
    kDone
  };
  void step(char c, std::vector<ToolCallDelta>& out);
  void start_call(std::vector<ToolCallDelta>& out);
  void add_arguments(std::string_view s, std::vector<ToolCallDelta>& out);
  bool string_ends(char c);  // inside a string: c is its closing quote (escapes followed)

  bool named_;
  std::string named_name_;
  std::vector<ToolCall> calls_;
  State state_ = State::kArrayOpen;
  std::string key_;         // the current key's JSON text, then its value
  std::string name_;        // the current item's name string as generated
  bool have_name_ = false;  // the current item's call is in calls_
  std::string pending_;     // parameters seen before the name (not under the schema)
  bool in_params_ = false;  // kValue: the value is "parameters" (passed on)
  int depth_ = 0;           // kValue: open objects/arrays
  bool in_string_ = false;  // kValue/kKey/kName: inside a string
  bool escape_ = false;     // ... just after a backslash
  bool scalar_ = false;     // kValue: a number or literal (ends at a delimiter)
};

// message.tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}];
// `new_id` makes each call's id ("chatcmpl-tool-<hex>").
ojson tool_calls_json(const std::vector<ToolCall>& calls,
                      const std::function<std::string()>& new_id);
// One entry of a chunk's delta.tool_calls: a call's first {"index", "id", "type",
// "function": {"name", "arguments": ""}}, then {"index", "function": {"arguments"}}.
ojson tool_call_delta_json(const ToolCallDelta& d, const std::function<std::string()>& new_id);

}  // namespace halo::serve
