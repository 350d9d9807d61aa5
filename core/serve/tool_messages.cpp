#include "serve/tool_messages.h"

#include <fmt/format.h>

#include "common/json_depth.h"

namespace halo::serve {

namespace {

[[noreturn]] void bad(size_t i, const std::string& where, const std::string& what) {
  throw ApiError(400, fmt::format("messages[{}]{} {}", i, where, what), "messages",
                 error_code::kInvalidValue);
}

void prepare_tool_calls(ojson& msg, size_t i, int max_depth) {
  ojson& calls = msg["tool_calls"];
  if (calls.is_null()) return;
  if (!calls.is_array()) bad(i, ".tool_calls", "must be a list");
  for (size_t j = 0; j < calls.size(); ++j) {
    const std::string at = fmt::format(".tool_calls[{}]", j);
    ojson& call = calls[j];
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
      bad(i, at,
          "must be an object {\"id\", \"type\": \"function\", \"function\": {\"name\", "
          "\"arguments\"}}");
    ojson& fn = call["function"];
    if (!fn.contains("name") || !fn["name"].is_string())
      bad(i, at + ".function.name", "must be a string");
    if (!fn.contains("arguments") || !fn["arguments"].is_string()) continue;  // an object already
    // Text that is no JSON object (a call cut off by max_tokens, sent back by
    // an agent) stays text: the template prints it as it is.
    ojson args;
    try {
      args = parse_json_bounded<ojson>(fn["arguments"].get_ref<const std::string&>(), max_depth,
                                       false);
    } catch (const JsonTooDeep& e) {
      bad(i, at + ".function.arguments",
          fmt::format("is JSON {} (--max-request-json-depth)", e.what()));
    }
    if (!args.is_discarded() && args.is_object()) fn["arguments"] = std::move(args);
  }
  if (msg.contains("content") && msg["content"].is_null()) msg["content"] = "";
}

}  // namespace

void prepare_tool_messages(ojson& messages, int max_depth) {
  for (size_t i = 0; i < messages.size(); ++i) {
    ojson& msg = messages[i];
    const std::string& role = msg["role"].get_ref<const std::string&>();
    if (role == "assistant" && msg.contains("tool_calls")) {
      prepare_tool_calls(msg, i, max_depth);
    } else if (role == "tool") {
      if (!msg.contains("tool_call_id") || !msg["tool_call_id"].is_string())
        bad(i, "",
            "is a tool message without a string 'tool_call_id' (the id of the call it answers)");
    }
  }
}

}  // namespace halo::serve
