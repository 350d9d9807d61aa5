// A model's output as the chat endpoint reads it (serve/chat_output.h): the
// first byte picks the tool-call parser (hermes, llama3_json, mistral,
// pythonic, or a forced "required" tool choice) and whether a qwen3 or
// deepseek_r1 reasoning parser runs first; the second byte where the rest is
// split in two. Both feedings must give the same calls, content and
// reasoning, and each call's argument fragments must add up to its
// arguments; a mismatch traps.
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "serve/chat_output.h"

namespace {

struct Seen {
  std::string reasoning, content;
  std::vector<halo::serve::ToolCall> calls;  // rebuilt from the deltas
};

Seen feed(const halo::serve::ToolChoice& tc, const std::string& parser,
          const std::string& reasoning, const std::vector<std::string_view>& pieces) {
  halo::serve::ChatOutput out(tc, parser, reasoning, false);
  Seen s;
  auto take = [&s](halo::serve::ChatDelta&& d) {
    s.reasoning += d.reasoning;
    s.content += d.content;
    for (const auto& t : d.tool_calls) {
      if (t.first) {
        if (t.index != s.calls.size()) __builtin_trap();  // calls start in order, once
        s.calls.push_back({t.text, ""});
      } else {
        if (t.index + 1 != s.calls.size()) __builtin_trap();  // arguments of the last call only
        s.calls.back().arguments += t.text;
      }
    }
  };
  for (auto p : pieces) take(out.feed(p));
  take(out.finish());
  // What the deltas built is what the parser holds (a call taken back leaves both).
  const auto& calls = out.calls();
  if (calls.size() > s.calls.size()) __builtin_trap();
  for (size_t i = 0; i < calls.size(); ++i)
    if (calls[i].name != s.calls[i].name || calls[i].arguments != s.calls[i].arguments)
      __builtin_trap();
  s.calls.resize(calls.size());
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halo::fuzz::quiet();
  if (size < 2) return 0;
  static const char* const kParsers[] = {"hermes", "llama3_json", "mistral", "pythonic", ""};
  static const char* const kReasoning[] = {"", "qwen3", "deepseek_r1"};
  halo::serve::ToolChoice tc;
  tc.has_tools = true;
  const std::string parser = kParsers[data[0] % 5];
  if (parser.empty()) tc.mode = halo::serve::ToolChoice::Mode::kRequired;
  const std::string reasoning = kReasoning[(data[0] / 5) % 3];
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
  const size_t cut = text.empty() ? 0 : data[1] % (text.size() + 1);
  halo::fuzz::guarded([&] {
    const Seen whole = feed(tc, parser, reasoning, {text});
    const Seen split = feed(tc, parser, reasoning, {text.substr(0, cut), text.substr(cut)});
    if (whole.reasoning != split.reasoning || whole.content != split.content) __builtin_trap();
    if (whole.calls.size() != split.calls.size()) __builtin_trap();
    for (size_t i = 0; i < whole.calls.size(); ++i)
      if (whole.calls[i].name != split.calls[i].name ||
          whole.calls[i].arguments != split.calls[i].arguments)
        __builtin_trap();
  });
  return 0;
}
