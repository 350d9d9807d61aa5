#include "serve/chat_output.h"

#include <algorithm>

namespace halo::serve {

namespace {

// `one_call`: parallel_tool_calls false, so only the first call is kept (as vLLM does).
void append(ChatDelta& d, ToolParseDelta&& p, bool one_call) {
  d.content += p.content;
  for (auto& c : p.tool_calls)
    if (!one_call || c.index == 0) d.tool_calls.push_back(std::move(c));
}

}  // namespace

void append(ChatDelta& d, ChatDelta&& more) {
  d.reasoning += more.reasoning;
  d.content += more.content;
  for (auto& c : more.tool_calls) d.tool_calls.push_back(std::move(c));
}

ChatOutput::ChatOutput(const ToolChoice& tc, const std::string& tool_parser,
                       const std::string& reasoning_parser, bool constrained)
    : mode_(tc.mode) {
  if (!reasoning_parser.empty() && !tc.forced()) {
    reasoning_ = ReasoningParser::make(reasoning_parser);
    // A constrained output holds reasoning only when it writes <think> itself.
    if (constrained && reasoning_->opened_by_prompt()) reasoning_.reset();
  }
  if (tc.forced())
    scanner_ = std::make_unique<ToolCallScanner>(tc);
  else if (tc.auto_parse() && !tool_parser.empty())
    parser_ = ToolCallParser::make(tool_parser);
  one_call_ = parser_ && !tc.parallel_tool_calls;
}

void ChatOutput::answer(std::string_view text, ChatDelta& d) {
  if (scanner_) {
    for (auto& c : scanner_->feed(text)) d.tool_calls.push_back(std::move(c));
  } else if (parser_) {
    append(d, parser_->feed(text), one_call_);
  } else {
    d.content += text;
  }
}

ChatDelta ChatOutput::feed(std::string_view text) {
  ChatDelta d;
  if (!reasoning_) {
    answer(text, d);
    return d;
  }
  ReasoningParser::Delta r = reasoning_->feed(text);
  d.reasoning = std::move(r.reasoning);
  answer(r.content, d);
  return d;
}

ChatDelta ChatOutput::finish() {
  ChatDelta d;
  if (reasoning_) {
    ReasoningParser::Delta r = reasoning_->finish();
    d.reasoning = std::move(r.reasoning);
    answer(r.content, d);
  }
  if (parser_) append(d, parser_->finish(), one_call_);
  return d;
}

std::vector<ToolCall> ChatOutput::calls() const {
  if (scanner_) return scanner_->calls();
  if (!parser_) return {};
  const auto& all = parser_->calls();
  return {all.begin(), all.begin() + static_cast<long>(one_call_ ? std::min<size_t>(all.size(), 1)
                                                                 : all.size())};
}

const char* ChatOutput::finish_reason(const char* engine_reason) const {
  const bool stopped = engine_reason && std::string_view(engine_reason) == "stop";
  const bool calls_end_it = mode_ == ToolChoice::Mode::kRequired || parser_ != nullptr;
  return stopped && calls_end_it && !calls().empty() ? "tool_calls" : engine_reason;
}

}  // namespace halo::serve
