#pragma once
// Guided decoding's token side: which tokens may come next in each state of a
// ByteDfa (regex_dfa.h), matched against the bytes every token adds to the text
// (Tokenizer::token_bytes), so a character split over several tokens and
// SentencePiece's leading spaces are handled as the text they become.
//
// TokenVocab: the vocabulary as a byte trie, built once per tokenizer.
// Guide: one compiled constraint (a DFA over one vocabulary) with its masks,
// computed for a state the first time it is asked for (a walk of the trie that
// stops where the DFA dies) and cached. A Guide is shared by every request with
// the same constraint; its methods may be called from any thread.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/guided/regex_dfa.h"
#include "text/tokenizer/tokenizer.h"

namespace halo::text::guided {

class TokenVocab {
 public:
  // Every token but the special ones (which guided text never contains) and
  // ids without bytes.
  explicit TokenVocab(const Tokenizer& tokenizer);
  int32_t size() const { return size_; }  // ids are < size()
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }

  // Trie over the tokens' bytes: node 0 is the root.
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // (byte, node), sorted by byte
    std::vector<int32_t> tokens;                        // tokens whose bytes end here
  };
  const std::vector<Node>& trie() const { return trie_; }

 private:
  int32_t size_ = 0;
  std::vector<std::string> bytes_;
  std::vector<Node> trie_;
};

class Guide {
 public:
  Guide(std::shared_ptr<const ByteDfa> dfa, std::shared_ptr<const TokenVocab> vocab,
        std::string what);

  int32_t start() const { return dfa_->start(); }
  // Every method takes ByteDfa::kDead too (a match broken by end-of-sequence
  // under ignore_eos): not accepting, nothing allowed, dead after any token.
  bool accepting(int32_t state) const { return state != ByteDfa::kDead && dfa_->accepting(state); }
  // Bit t set: token t keeps the text matchable from `state`. Computed once per state.
  const std::vector<uint64_t>& allowed(int32_t state) const;
  // The state after `token` (ByteDfa::kDead when it breaks the match).
  int32_t advance(int32_t state, int32_t token) const;
  const std::string& what() const { return what_; }  // the constraint, for messages
  int32_t vocab_size() const { return vocab_->size(); }

 private:
  std::shared_ptr<const ByteDfa> dfa_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::string what_;
  mutable std::mutex mu_;
  mutable std::unordered_map<int32_t, std::unique_ptr<std::vector<uint64_t>>> masks_;
  mutable std::vector<uint64_t> dead_;  // the empty mask
};

}  // namespace halo::text::guided
