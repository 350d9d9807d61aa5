#pragma once
// A regular expression compiled to a deterministic automaton over bytes, the
// layer under guided decoding (token masks walk it byte by byte).
//
// Full-match semantics: a text matches when the whole of it does. The DFA
// reads the UTF-8 bytes of the text; character classes only ever match valid
// UTF-8 sequences (no surrogates, nothing above U+10FFFF).
//
// Syntax taken (ECMAScript-like):
//   literal characters     any UTF-8 character (multi-byte ones become byte sequences)
//   .                      any one character except \n
//   \d \w \s               ASCII classes [0-9], [A-Za-z0-9_], [ \t\n\v\f\r]
//   \D \W \S               any character not in the class above (non-ASCII included)
//   \t \n \r \f \v \0      the control characters
//   \xHH \uXXXX            a code point (\uD8xx\uDCxx surrogate pairs are joined)
//   \ + punctuation        that character literally (\\ \. \* \[ \/ ...)
//   [abc] [a-z0-9_] [^..]  classes, ranges of any code points ([à-ÿ], [\u4e00-\u9fff]),
//                          escapes inside (\d, \], \-, \b = backspace); [^...] is any
//                          character not listed, [] matches nothing
//   ( ) (?: )              groups (no captures are recorded)
//   |                      alternation, empty branches allowed
//   * + ? {m} {m,} {m,n}   quantifiers, n <= 1000 ({m,n} expands to copies); a lazy
//                          '?' after a quantifier is accepted and means the same language
//   ^ $                    only at the very start / very end, and ignored
// Refused with halo::Error ("regex '<pattern>': <what> at offset N"): backreferences,
// lookaround and other (?...) groups, \b \B word boundaries, unknown letter escapes,
// ^ or $ elsewhere, unbalanced parentheses or brackets, reversed ranges, bad
// quantifiers, invalid UTF-8 in the pattern, and automata over max_states states
// or whose construction takes more than max_work steps.
//
// Construction: parse -> Thompson NFA over byte ranges -> subset construction to a
// DFA with a dense 256-entry transition table per state -> states that cannot reach
// acceptance are removed (their transitions become kDead), so every state that
// next() returns is live -> Hopcroft minimization (the result is the minimal DFA;
// max_states bounds the unminimized subset construction). The start state is
// kept even when the language is empty (then it is not accepting and all its
// transitions are kDead).
//
// A ByteDfa is immutable after compile(): any number of threads may read it.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace halo::text::guided {

class ByteDfa {
 public:
  // Over max_states states, or over max_work steps of construction (NFA
  // states visited, byte edges followed, states held by the sets: about 1 s
  // here), throws halo::Error.
  static ByteDfa compile(std::string_view pattern, size_t max_states = 20000,
                         size_t max_work = 100'000'000);

  static constexpr int32_t kDead = -1;

  int32_t start() const { return start_; }
  // kDead: no continuation can match. `state` must be a state (not kDead).
  int32_t next(int32_t state, uint8_t byte) const {
    return table_[static_cast<size_t>(state) * 256 + byte];
  }
  bool accepting(int32_t state) const { return accepting_[static_cast<size_t>(state)] != 0; }
  size_t num_states() const { return accepting_.size(); }

  // Walks `text` from start(): true when it ends in an accepting state.
  bool matches(std::string_view text) const;
  // The length in bytes of the longest text that matches; nullopt when texts
  // of any length do (a cycle is reachable).
  std::optional<size_t> max_text_bytes() const;

 private:
  ByteDfa() = default;

  int32_t start_ = 0;
  std::vector<int32_t> table_;      // num_states * 256
  std::vector<uint8_t> accepting_;  // num_states
};

}  // namespace halo::text::guided
