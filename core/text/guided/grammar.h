#pragma once
// A context-free grammar in GBNF (llama.cpp's grammar format, which vLLM's
// guided_grammar and xgrammar's EBNF also use), compiled to rules over bytes:
// the layer under grammar-guided decoding (grammar_matcher.h walks it).
//
// Syntax taken:
//   name ::= alternatives      a rule; names are [A-Za-z0-9_-]+, the start rule is `root`
//   a b | c                    sequence and alternation; an empty alternative matches ""
//   "text" 'text'              literals (any UTF-8), "" is the empty string
//   [abc] [a-z] [^...]         character classes over code points; [^...] is any other one;
//                              a literal '-' first or last, ']' escaped; [] is an error
//   .                          any one character (newline included)
//   ( ... )                    groups
//   x* x+ x? x{m} x{m,} x{m,n} x{,n}   repetition, n <= 1000, one operator per term
//   # ...                      comment to the end of the line
// Escapes in literals and classes: \n \r \t \\ \" \' \[ \] \- \^ \/ \xHH \uHHHH
// \UHHHHHHHH (not a surrogate). White space (newlines too) separates tokens; a rule ends where
// the next `name ::=` begins.
//
// Refused with halo::Error ("grammar: line L: <what>"): syntax errors, undefined
// or twice-defined rules, no `root`, a language with no text at all, and left
// recursion (a rule that can reach itself before reading a character, other
// than through its own last element): write `expr ::= term ("+" term)*` instead
// of `expr ::= expr "+" term`.
//
// After compile(), every alternative can complete (alternatives that never can
// are dropped), so a matcher that keeps a prefix alive can always finish it.
// Immutable after compile(): any number of threads may read it.
#include <bitset>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace halo::text::guided {

class Grammar {
 public:
  static Grammar compile(std::string_view gbnf);

  // An element of an alternative: a byte set (>= 0, an index into terms()) or
  // a rule reference (< 0: rule ~e).
  using Elem = int32_t;
  static bool is_rule(Elem e) { return e < 0; }
  static int32_t rule_of(Elem e) { return ~e; }

  int32_t root() const { return root_; }
  const std::vector<int32_t>& alts_of(int32_t rule) const {
    return rules_[static_cast<size_t>(rule)];
  }
  const std::vector<Elem>& alt(int32_t a) const { return alts_[static_cast<size_t>(a)]; }
  const std::bitset<256>& term(Elem e) const { return terms_[static_cast<size_t>(e)]; }
  size_t num_rules() const { return rules_.size(); }
  // The length in bytes of the longest text of the language; nullopt when a
  // rule can reach itself (then texts of any length are taken as possible).
  std::optional<size_t> max_text_bytes() const;
  size_t num_alts() const { return alts_.size(); }

 private:
  friend class GrammarBuilder;
  Grammar() = default;

  int32_t root_ = 0;
  std::vector<std::vector<int32_t>> rules_;  // rule -> its alternatives
  std::vector<std::vector<Elem>> alts_;      // alternative -> its elements
  std::vector<std::bitset<256>> terms_;      // distinct byte sets
};

}  // namespace halo::text::guided
