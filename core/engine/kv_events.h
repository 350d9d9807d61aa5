#pragma once
// What the prefix cache did, as vLLM's KV cache events describe it: blocks
// stored (now reusable by a later request), blocks removed (evicted), all
// cleared. A prefix-aware router (llm-d, the Gateway API Inference
// Extension) replays them to know which replica holds which prefix. The
// engine only records them; the server publishes them (serve/kv_event_publisher.h).
#include <cstdint>
#include <optional>
#include <vector>

namespace halo::engine {

struct KvCacheEvent {
  enum class Kind { kBlockStored, kBlockRemoved, kAllBlocksCleared };
  Kind kind = Kind::kBlockStored;
  std::vector<uint64_t> block_hashes;  // stored: consecutive blocks of one sequence, in order
  // Stored: the hash of the block before the first one; none for a
  // sequence's first block (its parent is the chain's root).
  std::optional<uint64_t> parent_block_hash;
  std::vector<int32_t> token_ids;  // stored: every block's tokens, in order
  int block_size = 0;              // stored
};

}  // namespace halo::engine
