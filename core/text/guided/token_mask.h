#pragma once
// Guided decoding's token side: which tokens may come next in each state of a
// byte-level matcher (a regex DFA or a grammar), matched against the bytes
// every token adds to the text (Tokenizer::token_bytes), so a character split
// over several tokens and SentencePiece's leading spaces are handled as the
// text they become.
//
// TokenVocab: the vocabulary as a byte trie, built once per tokenizer.
// ByteMatcher: a constraint as an automaton over bytes with int32 states.
// Guide: one compiled constraint over one vocabulary with its masks, computed
// for a state the first time it is asked for (a walk of the trie that stops
// where the matcher dies) and cached. A Guide is shared by every request with
// the same constraint; its methods may be called from any thread (it
// serializes its matcher, whose tables may grow lazily).
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

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

// Sets bit t of `mask` for every token whose bytes keep `step` alive from
// `state`: a depth-first walk of the trie, a dead state (< 0) pruning its
// subtree. `step(state, byte)` returns the next state.
template <class Step>
void walk_trie(const TokenVocab& vocab, int32_t state, Step&& step, std::vector<uint64_t>& mask) {
  const auto& trie = vocab.trie();
  std::vector<std::pair<int32_t, int32_t>> stack{{0, state}};
  while (!stack.empty()) {
    const auto [node, s] = stack.back();
    stack.pop_back();
    const auto& n = trie[static_cast<size_t>(node)];
    if (node != 0)
      for (int32_t t : n.tokens) mask[static_cast<size_t>(t) / 64] |= uint64_t{1} << (t % 64);
    for (const auto& [byte, child] : n.children) {
      const int32_t next = step(s, byte);
      if (next >= 0) stack.push_back({child, next});
    }
  }
}

// A constraint as an automaton over bytes. States are ids >= 0; kDead (-1)
// is the broken match. Not thread-safe: its tables may grow as it is walked,
// so a Guide calls it under its lock.
class ByteMatcher {
 public:
  static constexpr int32_t kDead = -1;
  virtual ~ByteMatcher() = default;
  virtual int32_t start() = 0;
  virtual bool accepting(int32_t state) = 0;  // state >= 0
  // The state after `bytes` (kDead when they break the match).
  virtual int32_t advance(int32_t state, std::string_view bytes) = 0;
  // Sets the bits of the tokens allowed from `state` (mask is zeroed, sized to the vocabulary).
  virtual void fill_mask(int32_t state, const TokenVocab& vocab, std::vector<uint64_t>& mask) = 0;
  // Bytes held by lazily grown tables (0 for a matcher built up front).
  virtual size_t table_bytes() const { return 0; }
  // The longest text in bytes that completes the match from start(); nullopt
  // when there is no bound.
  virtual std::optional<size_t> max_text_bytes() const = 0;
};

class Guide {
 public:
  static constexpr int32_t kDead = ByteMatcher::kDead;
  using Mask = std::shared_ptr<const std::vector<uint64_t>>;

  Guide(std::unique_ptr<ByteMatcher> matcher, std::shared_ptr<const TokenVocab> vocab,
        std::string what);

  int32_t start() const;
  // Every method takes kDead too (a match broken by end-of-sequence under
  // ignore_eos): not accepting, nothing allowed, dead after any token.
  bool accepting(int32_t state) const;
  // Bit t set: token t keeps the text matchable from `state`. Computed once
  // per state and cached (the cache is dropped whole past kMaxMaskBytes).
  Mask allowed(int32_t state) const;
  // The state after `token` (kDead when it breaks the match).
  int32_t advance(int32_t state, int32_t token) const;
  const std::string& what() const { return what_; }  // the constraint, for messages
  // The longest text the constraint allows, in bytes (nullopt: unbounded).
  // Every token adds at least one byte, so it bounds the tokens too.
  std::optional<size_t> max_text_bytes() const { return max_text_bytes_; }
  int32_t vocab_size() const { return vocab_->size(); }
  // The matcher's lazily built tables have outgrown their budget: a cache of
  // guides should compile a fresh one for new requests (this one stays valid).
  bool worn_out() const;

  static constexpr size_t kMaxMaskBytes = size_t{64} << 20;
  static constexpr size_t kMaxTableBytes = size_t{256} << 20;

 private:
  std::unique_ptr<ByteMatcher> matcher_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::string what_;
  std::optional<size_t> max_text_bytes_;
  mutable std::mutex mu_;
  mutable std::unordered_map<int32_t, Mask> masks_;
  mutable size_t mask_bytes_ = 0;
  Mask dead_;  // the empty mask
};

// Applies a mask to logits: every token not allowed becomes -inf. Tokens at or
// past the mask's vocabulary are disallowed. Returns whether any token is left.
bool apply_mask(const std::vector<uint64_t>& allowed, int32_t mask_vocab, float* logits, int32_t n);

}  // namespace halo::text::guided
