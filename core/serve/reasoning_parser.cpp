#include "serve/reasoning_parser.h"

#include <fmt/format.h>

#include "common/error.h"

namespace halo::serve {

namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

// The length of the longest suffix of `s` that is a proper prefix of `marker`.
size_t partial_marker(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (marker.starts_with(s.substr(s.size() - n))) return n;
  return 0;
}

}  // namespace

bool ReasoningParser::known(std::string_view name) {
  return name == "deepseek_r1" || name == "qwen3";
}

std::unique_ptr<ReasoningParser> ReasoningParser::make(std::string_view name) {
  if (!known(name))
    throw Error(
        fmt::format("unknown reasoning parser '{}' (halo has deepseek_r1 and qwen3)", name));
  return std::unique_ptr<ReasoningParser>(new ReasoningParser(name == "deepseek_r1"));
}

ReasoningParser::Delta ReasoningParser::feed(std::string_view text) {
  Delta d;
  held_ += text;
  if (state_ == State::kStart) {
    // Decided once the output either opens with <think> or cannot.
    if (held_.size() < kOpen.size() && kOpen.starts_with(held_)) return d;
    const bool opens = held_.starts_with(kOpen);
    if (opens) held_.erase(0, kOpen.size());
    state_ = opens || opened_by_prompt_ ? State::kReasoning : State::kContent;
  }
  if (state_ == State::kReasoning) {
    if (const size_t at = held_.find(kClose); at != std::string::npos) {
      d.reasoning += held_.substr(0, at);
      held_.erase(0, at + kClose.size());
      state_ = State::kContent;
    } else {
      const size_t keep = partial_marker(held_, kClose);
      d.reasoning += held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return d;
    }
  }
  d.content += held_;  // kContent: nothing more to look for
  held_.clear();
  return d;
}

ReasoningParser::Delta ReasoningParser::finish() {
  Delta d;
  if (state_ == State::kStart) state_ = opened_by_prompt_ ? State::kReasoning : State::kContent;
  emit(held_, d);
  held_.clear();
  return d;
}

std::optional<engine::ReasoningGate> reasoning_gate(std::string_view parser,
                                                    const text::Tokenizer& tok) {
  const auto end = tok.token_to_id(kClose);
  if (!end) return std::nullopt;
  engine::ReasoningGate gate;
  gate.end = *end;
  gate.start = tok.token_to_id(kOpen).value_or(-1);
  gate.open = ReasoningParser::make(parser)->opened_by_prompt();
  return gate;
}

}  // namespace halo::serve
