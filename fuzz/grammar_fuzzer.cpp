// GBNF grammars, as guided_grammar sends them: the input is compiled
// (grammar.h); a grammar that compiles is matched against the input itself
// through the pushdown matcher, and every state that walk reaches must be
// live (accepting, or some byte continues it), since a dead state would leave
// guided decoding without a token; a whole input that matches is never longer
// than the grammar's longest text.
#include <memory>

#include "fuzz_util.h"
#include "text/guided/grammar.h"
#include "text/guided/matchers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halo::fuzz::quiet();
  namespace g = halo::text::guided;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  halo::fuzz::guarded([&] {
    auto m = g::make_grammar_matcher(std::make_shared<const g::Grammar>(g::Grammar::compile(in)));
    int32_t s = m->start();
    for (size_t i = 0; i <= in.size() && i < 256; ++i) {
      bool live = m->accepting(s);
      for (int b = 0; b < 256 && !live; ++b) {
        const char c = static_cast<char>(b);
        live = m->advance(s, std::string_view(&c, 1)) != g::ByteMatcher::kDead;
      }
      if (!live) __builtin_trap();
      if (i == in.size()) {
        // The longest text bounds every text that matches (min_tokens is refused by it).
        const auto most = m->max_text_bytes();
        if (m->accepting(s) && most && in.size() > *most) __builtin_trap();
        break;
      }
      s = m->advance(s, in.substr(i, 1));
      if (s == g::ByteMatcher::kDead) break;
    }
  });
  return 0;
}
