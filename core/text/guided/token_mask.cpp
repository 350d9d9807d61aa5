#include "text/guided/token_mask.h"

#include <algorithm>
#include <limits>

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

Guide::Guide(std::unique_ptr<ByteMatcher> matcher, std::shared_ptr<const TokenVocab> vocab,
             std::string what)
    : matcher_(std::move(matcher)),
      vocab_(std::move(vocab)),
      what_(std::move(what)),
      max_text_bytes_(matcher_->max_text_bytes()),
      dead_(std::make_shared<const std::vector<uint64_t>>(
          (static_cast<size_t>(vocab_->size()) + 63) / 64, 0)) {}

int32_t Guide::start() const {
  std::lock_guard lk(mu_);
  return matcher_->start();
}

bool Guide::accepting(int32_t state) const {
  if (state == kDead) return false;
  std::lock_guard lk(mu_);
  return matcher_->accepting(state);
}

Guide::Mask Guide::allowed(int32_t state) const {
  if (state == kDead) return dead_;  // nothing may follow a broken match
  std::lock_guard lk(mu_);
  if (auto it = masks_.find(state); it != masks_.end()) return it->second;
  auto mask = std::make_shared<std::vector<uint64_t>>(dead_->size(), 0);
  matcher_->fill_mask(state, *vocab_, *mask);
  const size_t bytes = mask->size() * sizeof(uint64_t);
  if (mask_bytes_ + bytes > kMaxMaskBytes) {  // recomputable: drop them all
    masks_.clear();
    mask_bytes_ = 0;
  }
  mask_bytes_ += bytes;
  masks_[state] = mask;
  return mask;
}

int32_t Guide::advance(int32_t state, int32_t token) const {
  if (state == kDead || token < 0 || token >= vocab_->size()) return kDead;
  const std::string& b = vocab_->bytes(token);
  if (b.empty()) return kDead;
  std::lock_guard lk(mu_);
  return matcher_->advance(state, b);
}

bool Guide::worn_out() const {
  std::lock_guard lk(mu_);
  return matcher_->table_bytes() > kMaxTableBytes;
}

bool apply_mask(const std::vector<uint64_t>& allowed, int32_t mask_vocab, float* logits,
                int32_t n) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const int32_t covered = std::min(mask_vocab, n);
  bool any = false;
  // Whole words first: most are all-allowed or all-disallowed.
  int32_t t = 0;
  for (; t + 64 <= covered; t += 64) {
    const uint64_t w = allowed[static_cast<size_t>(t) / 64];
    if (w == ~uint64_t{0}) {
      any = true;
    } else if (w == 0) {
      std::fill(logits + t, logits + t + 64, ninf);
    } else {
      any = true;
      for (int b = 0; b < 64; ++b)
        if (!((w >> b) & 1)) logits[t + b] = ninf;
    }
  }
  for (; t < covered; ++t) {
    if ((allowed[static_cast<size_t>(t) / 64] >> (t % 64)) & 1) {
      any = true;
    } else {
      logits[t] = ninf;
    }
  }
  std::fill(logits + covered, logits + n, ninf);
  return any;
}

}  // namespace halo::text::guided
