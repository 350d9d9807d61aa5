#include "engine/kv_block_manager.h"

#include <fmt/format.h>

#include "common/error.h"

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

KvBlockManager::KvBlockManager(int num_blocks, int block_size)
    : num_blocks_(num_blocks), block_size_(block_size), ref_counts_(num_blocks, 0) {
  if (num_blocks <= 0 || block_size <= 0)
    throw Error(fmt::format("KV block manager: num_blocks={} block_size={} must be positive", num_blocks, block_size));
  for (int32_t b = 0; b < num_blocks; ++b) free_.push_back(b);
}

bool KvBlockManager::allocate_slots(Sequence& seq, int num_tokens) {
  int need = blocks_needed(num_tokens) - static_cast<int>(seq.block_table.size());
  if (need <= 0) return true;
  if (need > num_free_blocks()) return false;
  for (int i = 0; i < need; ++i) {
    int32_t b = free_.front();
    free_.pop_front();
    ref_counts_[b] = 1;
    seq.block_table.push_back(b);
  }
  return true;
}

void KvBlockManager::free(Sequence& seq) {
  // Freed in reverse so the tail of a sequence, least likely to be shared, is reused first.
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) {
    if (--ref_counts_[*it] == 0) free_.push_back(*it);
  }
  seq.block_table.clear();
}

}  // namespace halo::engine
