#pragma once
// Compiled constraints of one tokenizer, shared by the requests that ask for
// the same one: the most recently used `capacity` are kept, and one whose
// lazily built tables have outgrown their budget (Guide::worn_out) is compiled
// afresh for the next request. The vocabulary's byte trie is built at the
// first get(). Thread-safe; the tokenizer must outlive the cache.
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "text/guided/token_mask.h"

namespace halo::text::guided {

enum class ConstraintKind { kRegex, kGrammar };

class GuideCache {
 public:
  explicit GuideCache(const Tokenizer& tokenizer, size_t capacity = 64)
      : tokenizer_(tokenizer), capacity_(capacity) {}

  // The guide of a regular expression (regex_dfa.h) or a GBNF grammar
  // (grammar.h). Throws halo::FieldError naming `what` ("<what>: <reason>")
  // for a constraint that does not compile or that matches no text at all.
  std::shared_ptr<const Guide> get(ConstraintKind kind, const std::string& text,
                                   const std::string& what);

 private:
  struct Entry {
    ConstraintKind kind;
    std::string text;
    std::shared_ptr<const Guide> guide;
  };
  const Tokenizer& tokenizer_;
  size_t capacity_;
  std::mutex mu_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::vector<Entry> entries_;  // least recently used first
};

}  // namespace halo::text::guided
