#pragma once
// vLLM's --reasoning-parser: the text a reasoning model writes between
// <think> and </think> goes to `reasoning_content`, the rest to `content`.
//   deepseek_r1  the prompt opens the reasoning (DeepSeek-R1's template ends
//                with <think>): everything up to </think> is reasoning; a
//                leading <think> written again is dropped; without </think>
//                all of it is reasoning.
//   qwen3        reasoning only when the output opens with <think> (Qwen3's
//                enable_thinking: false puts an empty think block into the
//                prompt instead, and the whole output is content); up to
//                </think>, or all of it when it never closes.
// Fed the output incrementally in any pieces: text that may be the start of
// a marker is held back until it is decided, so no marker reaches either
// side. A plain value used by one thread at a time.
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "engine/sampling_params.h"
#include "text/tokenizer/tokenizer.h"

namespace halo::serve {

class ReasoningParser {
 public:
  // Throws halo::Error naming the parsers there are.
  static std::unique_ptr<ReasoningParser> make(std::string_view name);
  static bool known(std::string_view name);

  struct Delta {
    std::string reasoning, content;
  };
  Delta feed(std::string_view text);
  Delta finish();  // the end of the output: what was held back
  // Whether the prompt opens the reasoning (deepseek_r1), so that text
  // without any marker is reasoning.
  bool opened_by_prompt() const { return opened_by_prompt_; }

 private:
  enum class State { kStart, kReasoning, kContent };
  explicit ReasoningParser(bool opened_by_prompt)
      : opened_by_prompt_(opened_by_prompt), state_(State::kStart) {}
  void emit(std::string_view s, Delta& d) const {
    (state_ == State::kContent ? d.content : d.reasoning) += s;
  }

  bool opened_by_prompt_;
  State state_;
  std::string held_;  // undecided text: a possible marker
};

// What a guided answer after this parser's reasoning waits for
// (engine::ReasoningGate): the tokenizer's </think> and <think> ids, open
// when the prompt opens the reasoning (deepseek_r1). nullopt when </think> is
// not one token of the vocabulary: then the guide holds from the first token
// and the reasoning is only what the guide lets the model write.
std::optional<engine::ReasoningGate> reasoning_gate(std::string_view parser,
                                                    const text::Tokenizer& tok);

}  // namespace halo::serve
