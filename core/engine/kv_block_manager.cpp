#include "engine/kv_block_manager.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "common/error.h"
#include "engine/block_hash.h"

namespace halo::engine {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kNone: break;
  }
  return "";
}

KvBlockManager::KvBlockManager(int num_blocks, int block_size, bool enable_prefix_caching, uint64_t hash_root)
    : num_blocks_(num_blocks), block_size_(block_size), prefix_caching_(enable_prefix_caching), hash_root_(hash_root) {
  if (num_blocks <= 0 || block_size <= 0)
    throw Error(fmt::format("KV block manager: num_blocks={} block_size={} must be positive", num_blocks, block_size));
  blocks_.resize(num_blocks);
  for (int32_t b = 0; b < num_blocks; ++b) {
    blocks_[b].in_free = true;
    blocks_[b].free_pos = free_.insert(free_.end(), b);
  }
  if (prefix_caching_) cached_tokens_.resize(size_t(num_blocks) * block_size);
}

void KvBlockManager::enable_events() {
  if (!prefix_caching_ || record_events_) return;
  record_events_ = true;
  event(KvCacheEvent::Kind::kAllBlocksCleared, false);
}

std::vector<KvCacheEvent> KvBlockManager::take_events() { return std::exchange(events_, {}); }

uint64_t KvBlockManager::chain_hash(uint64_t parent, const Sequence& seq, int block_index) {
  hash_tokens_.resize(block_size_);
  for (int i = 0; i < block_size_; ++i) hash_tokens_[i] = seq.token_at(block_index * block_size_ + i);
  return block_hash(parent, hash_tokens_);
}

KvCacheEvent& KvBlockManager::event(KvCacheEvent::Kind kind, bool extend) {
  if (!extend || events_.empty() || events_.back().kind != kind) {
    events_.emplace_back();
    events_.back().kind = kind;
  }
  return events_.back();
}

// One BlockStored per run of consecutive blocks a sequence registers at once,
// as vLLM groups them.
void KvBlockManager::record_stored(std::optional<uint64_t> parent, uint64_t hash, const Sequence& seq,
                                   int block_index, bool extend) {
  auto& ev = event(KvCacheEvent::Kind::kBlockStored, extend);
  if (ev.block_hashes.empty()) {
    ev.parent_block_hash = parent;
    ev.block_size = block_size_;
  }
  ev.block_hashes.push_back(hash);
  for (int t = 0; t < block_size_; ++t) ev.token_ids.push_back(seq.token_at(block_index * block_size_ + t));
}

bool KvBlockManager::same_tokens(int32_t block, const Sequence& seq, int block_index) const {
  const int32_t* stored = &cached_tokens_[size_t(block) * block_size_];
  for (int i = 0; i < block_size_; ++i)
    if (stored[i] != seq.token_at(block_index * block_size_ + i)) return false;
  return true;
}

void KvBlockManager::take(int32_t b) {
  Block& blk = blocks_[b];
  if (blk.in_free) {
    free_.erase(blk.free_pos);
    blk.in_free = false;
  }
  blk.ref++;
}

int32_t KvBlockManager::pop_free() {
  int32_t b = free_.front();
  free_.pop_front();
  Block& blk = blocks_[b];
  blk.in_free = false;
  if (blk.cached) {  // evicted: its contents are about to be overwritten
    auto it = cached_.find(blk.hash);
    if (it != cached_.end() && it->second == b) {
      cached_.erase(it);
      if (record_events_) event(KvCacheEvent::Kind::kBlockRemoved, true).block_hashes.push_back(blk.hash);
    }
    blk.cached = false;
  }
  return b;
}

int KvBlockManager::attach_cached_prefix(Sequence& seq) {
  // Prompt logprobs need the logits of every prompt position, mean and CLS
  // pooling their hidden states: no reuse then.
  if (!prefix_caching_ || !seq.block_table.empty() || seq.params.prompt_logprobs >= 0 ||
      seq.params.pooling.every_position())
    return 0;
  // The last token must be computed to produce logits, so at most
  // (num_tokens - 1) tokens can come from the cache.
  int max_blocks = (seq.num_tokens() - 1) / block_size_;
  seq.block_hashes.clear();
  uint64_t parent = root_of(seq);
  for (int i = 0; i < max_blocks; ++i) {
    uint64_t h = chain_hash(parent, seq, i);
    auto it = cached_.find(h);
    if (it == cached_.end() || !same_tokens(it->second, seq, i)) break;
    take(it->second);
    seq.block_table.push_back(it->second);
    seq.block_hashes.push_back(h);
    parent = h;
  }
  int hit = static_cast<int>(seq.block_table.size()) * block_size_;
  seq.num_computed_tokens = hit;
  return hit;
}

bool KvBlockManager::allocate_slots(Sequence& seq, int num_tokens) {
  int need = blocks_needed(num_tokens) - static_cast<int>(seq.block_table.size());
  if (need <= 0) return true;
  if (need > num_free_blocks()) return false;
  for (int i = 0; i < need; ++i) {
    int32_t b = pop_free();
    blocks_[b].ref = 1;
    seq.block_table.push_back(b);
  }
  return true;
}

void KvBlockManager::cache_full_blocks(Sequence& seq) {
  if (!prefix_caching_) return;
  int full = std::min<int>(seq.num_computed_tokens / block_size_, static_cast<int>(seq.block_table.size()));
  bool extend = false;  // the previous block was stored by this call
  for (int i = static_cast<int>(seq.block_hashes.size()); i < full; ++i) {
    uint64_t parent = i == 0 ? root_of(seq) : seq.block_hashes[i - 1];
    uint64_t h = chain_hash(parent, seq, i);
    seq.block_hashes.push_back(h);
    int32_t b = seq.block_table[i];
    Block& blk = blocks_[b];
    if (blk.cached || cached_.count(h)) {  // an identical block is already registered
      extend = false;
      continue;
    }
    if (record_events_) record_stored(i == 0 ? std::nullopt : std::optional(parent), h, seq, i, extend);
    extend = true;
    blk.cached = true;
    blk.hash = h;
    cached_[h] = b;
    for (int t = 0; t < block_size_; ++t) cached_tokens_[size_t(b) * block_size_ + t] = seq.token_at(i * block_size_ + t);
  }
}

bool KvBlockManager::fork(const Sequence& parent, Sequence& child, int num_tokens,
                          BlockCopies& copies) {
  const int last = (num_tokens - 1) / block_size_;  // the block holding the last token
  if (num_tokens < 1 || !child.block_table.empty() || parent.num_computed_tokens < num_tokens ||
      static_cast<int>(parent.block_table.size()) <= last)
    throw Error(fmt::format(
        "KV fork of {} tokens: the parent has not computed them or the child has blocks",
        num_tokens));
  if (free_.empty()) return false;
  for (int i = 0; i < last; ++i) {
    take(parent.block_table[i]);
    child.block_table.push_back(parent.block_table[i]);
  }
  const size_t hashed = std::min<size_t>(last, parent.block_hashes.size());
  child.block_hashes.assign(parent.block_hashes.begin(), parent.block_hashes.begin() + hashed);
  int32_t b = pop_free();
  blocks_[b].ref = 1;
  child.block_table.push_back(b);
  copies.src.push_back(parent.block_table[last]);
  copies.dst.push_back(b);
  child.num_computed_tokens = num_tokens - 1;
  return true;
}

void KvBlockManager::trim(Sequence& seq, int num_tokens) {
  const size_t keep = static_cast<size_t>(blocks_needed(num_tokens));
  while (seq.block_table.size() > keep) {
    const int32_t b = seq.block_table.back();
    Block& blk = blocks_[b];
    if (blk.ref != 1 || blk.cached)
      throw Error(fmt::format("KV trim: block {} past {} tokens is shared or cached", b, num_tokens));
    blk.ref = 0;
    blk.in_free = true;
    blk.free_pos = free_.insert(free_.begin(), b);
    seq.block_table.pop_back();
  }
}

void KvBlockManager::free(Sequence& seq) {
  // Tail first: the end of a sequence is the least likely to be shared, so it
  // is evicted first.
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) {
    Block& blk = blocks_[*it];
    if (--blk.ref == 0) {
      blk.in_free = true;
      blk.free_pos = free_.insert(free_.end(), *it);
    }
  }
  seq.block_table.clear();
  seq.block_hashes.clear();
}

}  // namespace halo::engine
