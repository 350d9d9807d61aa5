#pragma once
// Owns the pool of fixed-size KV blocks: reference counts, a free list, and
// (with prefix caching) a map from the hash chain of a full block's tokens to
// the block that holds them. The scheduler asks it for slots; it never decides
// who runs.
//
// Invariants: a block is on the free list exactly when its ref count is 0;
// only full blocks are ever cached or shared (a fork copies the block holding
// its last prompt token, even a full one, instead of sharing it), so a shared
// block is never written again; a freed cached block keeps its contents until it is handed
// out again (least recently freed first), so a later request can still hit it.
//
// Block hashes chain from a root (engine/block_hash.h: the scheme llm-d's
// router computes). With events on, every change to the cache is recorded
// as a KvCacheEvent for take_events(). Not thread-safe: the engine's thread
// owns it.
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "engine/kv_events.h"
#include "engine/sequence.h"

namespace halo::engine {

class KvBlockManager {
 public:
  // `hash_root` is the parent hash of every sequence's first block (a sequence with
  // its own Sequence::hash_root, a LoRA adapter's, uses that).
  KvBlockManager(int num_blocks, int block_size, bool enable_prefix_caching = false, uint64_t hash_root = 0);

  // Records KvCacheEvents from now on (prefix caching only), starting with
  // AllBlocksCleared: the cache is empty, whatever a router remembers.
  void enable_events();
  // The events recorded since the last call, oldest first.
  std::vector<KvCacheEvent> take_events();

  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  int num_free_blocks() const { return static_cast<int>(free_.size()); }
  float usage() const { return num_blocks_ ? 1.0f - float(free_.size()) / float(num_blocks_) : 0.0f; }
  bool prefix_caching() const { return prefix_caching_; }

  // Blocks needed in all to hold `num_tokens` tokens.
  int blocks_needed(int num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }

  // Prefix caching: gives a sequence with an empty block table the cached
  // blocks of its longest cached prefix of full blocks (never all of its
  // tokens: the last one is always computed, to produce logits) and sets
  // num_computed_tokens. Returns the tokens hit; 0 when caching is off.
  int attach_cached_prefix(Sequence& seq);

  // Grows seq.block_table so that it covers `num_tokens` tokens. Returns false
  // (and changes nothing) when not enough blocks are free.
  bool allocate_slots(Sequence& seq, int num_tokens);

  // Prefix caching: registers the blocks of `seq` that are now full of
  // computed tokens, so later requests can reuse them.
  void cache_full_blocks(Sequence& seq);

  // Copy-on-write fork of the first `num_tokens` tokens (the prompt) of
  // `parent` into `child`, whose block table must be empty. The child shares
  // (ref++) every block wholly before the block holding token num_tokens - 1
  // and gets a fresh block in place of that one, whose contents the caller
  // must copy from the parent's block (appended to `copies`) before the child
  // runs; the child's num_computed_tokens becomes num_tokens - 1, so it
  // recomputes only its last prompt token, into its private block, and
  // samples from its own logits. The parent must have computed those tokens.
  // Returns false (and changes nothing) when no block is free.
  struct BlockCopies {
    std::vector<int32_t> src, dst;
  };
  bool fork(const Sequence& parent, Sequence& child, int num_tokens, BlockCopies& copies);

  // Gives back the blocks past those `num_tokens` tokens need (a verify's
  // rejected proposals), first in line to be handed out again: they hold
  // nothing worth keeping. They are private and unregistered, as every block
  // past a sequence's computed tokens is.
  void trim(Sequence& seq, int num_tokens);

  // Returns every block of the sequence to the pool and clears its table.
  void free(Sequence& seq);

  // Prefix cache counters, in tokens (as vLLM reports them): the scheduler
  // records one query per admitted request.
  void record_prefix_query(int tokens, int hit) { queries_ += tokens; hits_ += hit; }
  uint64_t prefix_queries() const { return queries_; }
  uint64_t prefix_hits() const { return hits_; }

 private:
  struct Block {
    int ref = 0;
    bool cached = false;
    uint64_t hash = 0;
    bool in_free = false;
    std::list<int32_t>::iterator free_pos;
  };
  uint64_t chain_hash(uint64_t parent, const Sequence& seq, int block_index);
  // The last event if `extend` and it is of `kind`, else a new one.
  KvCacheEvent& event(KvCacheEvent::Kind kind, bool extend);
  bool same_tokens(int32_t block, const Sequence& seq, int block_index) const;
  void record_stored(std::optional<uint64_t> parent, uint64_t hash, const Sequence& seq, int block_index,
                     bool extend);
  void take(int32_t block);     // ref++ (off the free list if it was free)
  int32_t pop_free();           // evicts the least recently freed block

  int num_blocks_;
  int block_size_;
  bool prefix_caching_;
  uint64_t hash_root_;
  uint64_t root_of(const Sequence& seq) const { return seq.hash_root ? seq.hash_root : hash_root_; }
  bool record_events_ = false;
  std::vector<KvCacheEvent> events_;
  std::vector<Block> blocks_;
  std::list<int32_t> free_;  // front = next to hand out
  std::unordered_map<uint64_t, int32_t> cached_;  // chain hash -> block
  std::vector<int32_t> cached_tokens_;             // [num_blocks * block_size], checked on a hit
  std::vector<int32_t> hash_tokens_;               // chain_hash's copy of one block's tokens (no allocation per block)
  uint64_t queries_ = 0, hits_ = 0;
};

}  // namespace halo::engine
