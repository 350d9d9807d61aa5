#include "text/guided/token_mask.h"

#include <algorithm>

namespace halo::text::guided {

TokenVocab::TokenVocab(const Tokenizer& tokenizer)
    : size_(tokenizer.vocab_size()), bytes_(static_cast<size_t>(size_)) {
  trie_.emplace_back();
  for (int32_t id = 0; id < size_; ++id) {
    if (tokenizer.is_special(id)) continue;
    std::string b = tokenizer.token_bytes(id);
    if (b.empty()) continue;
    int32_t node = 0;
    for (unsigned char c : b) {
      auto& ch = trie_[static_cast<size_t>(node)].children;
      auto it = std::lower_bound(ch.begin(), ch.end(), std::pair<uint8_t, int32_t>{c, -1});
      if (it != ch.end() && it->first == c) {
        node = it->second;
      } else {
        const auto next = static_cast<int32_t>(trie_.size());
        ch.insert(it, {c, next});
        trie_.emplace_back();  // invalidates `ch`: not used below
        node = next;
      }
    }
    trie_[static_cast<size_t>(node)].tokens.push_back(id);
    bytes_[static_cast<size_t>(id)] = std::move(b);
  }
}

Guide::Guide(std::shared_ptr<const ByteDfa> dfa, std::shared_ptr<const TokenVocab> vocab,
             std::string what)
    : dfa_(std::move(dfa)), vocab_(std::move(vocab)), what_(std::move(what)) {}

const std::vector<uint64_t>& Guide::allowed(int32_t state) const {
  std::lock_guard lk(mu_);
  if (state == ByteDfa::kDead) {  // nothing may follow a broken match
    if (dead_.empty()) dead_.assign((static_cast<size_t>(vocab_->size()) + 63) / 64, 0);
    return dead_;
  }
  auto& slot = masks_[state];
  if (slot) return *slot;
  auto mask =
      std::make_unique<std::vector<uint64_t>>((static_cast<size_t>(vocab_->size()) + 63) / 64, 0);
  // Depth-first over the trie, carrying the DFA state; a dead state prunes the subtree.
  const auto& trie = vocab_->trie();
  std::vector<std::pair<int32_t, int32_t>> stack{{0, state}};
  while (!stack.empty()) {
    const auto [node, s] = stack.back();
    stack.pop_back();
    const auto& n = trie[static_cast<size_t>(node)];
    if (node != 0)
      for (int32_t t : n.tokens) (*mask)[static_cast<size_t>(t) / 64] |= uint64_t{1} << (t % 64);
    for (const auto& [byte, child] : n.children) {
      const int32_t next = dfa_->next(s, byte);
      if (next != ByteDfa::kDead) stack.push_back({child, next});
    }
  }
  slot = std::move(mask);
  return *slot;
}

int32_t Guide::advance(int32_t state, int32_t token) const {
  if (state == ByteDfa::kDead || token < 0 || token >= vocab_->size()) return ByteDfa::kDead;
  const std::string& b = vocab_->bytes(token);
  if (b.empty()) return ByteDfa::kDead;
  for (unsigned char c : b) {
    state = dfa_->next(state, c);
    if (state == ByteDfa::kDead) break;
  }
  return state;
}

}  // namespace halo::text::guided
