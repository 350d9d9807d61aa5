#pragma once
// The two kinds of constraint a Guide (token_mask.h) drives: a regular
// expression compiled to a minimal DFA (regex_dfa.h), and a context-free
// grammar (grammar.h) matched by a pushdown automaton whose configurations are
// numbered as they are met. Each matcher is owned by one Guide.
#include <memory>

#include "text/guided/grammar.h"
#include "text/guided/regex_dfa.h"
#include "text/guided/token_mask.h"

namespace halo::text::guided {

std::unique_ptr<ByteMatcher> make_regex_matcher(std::shared_ptr<const ByteDfa> dfa);
std::unique_ptr<ByteMatcher> make_grammar_matcher(std::shared_ptr<const Grammar> grammar);

}  // namespace halo::text::guided
