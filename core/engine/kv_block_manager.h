#pragma once
// Owns the pool of fixed-size KV blocks: a free list and a reference count per
// block. The scheduler asks it for slots; it never decides who runs.
// Invariant: a block is on the free list exactly when its ref count is 0.
#include <cstdint>
#include <deque>
#include <vector>

#include "engine/sequence.h"

namespace halo::engine {

class KvBlockManager {
 public:
  KvBlockManager(int num_blocks, int block_size);

  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  int num_free_blocks() const { return static_cast<int>(free_.size()); }
  float usage() const { return num_blocks_ ? 1.0f - float(free_.size()) / float(num_blocks_) : 0.0f; }

  // Blocks `seq` needs in all to hold `num_tokens` tokens.
  int blocks_needed(int num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }

  // Grows seq.block_table so that it covers `num_tokens` tokens. Returns false
  // (and changes nothing) when not enough blocks are free.
  bool allocate_slots(Sequence& seq, int num_tokens);

  // Returns every block of the sequence to the pool and clears its table.
  void free(Sequence& seq);

 private:
  int num_blocks_;
  int block_size_;
  std::vector<int> ref_counts_;
  std::deque<int32_t> free_;
};

}  // namespace halo::engine
