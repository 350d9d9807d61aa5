#include <gtest/gtest.h>

#include <set>

#include "common/error.h"
#include "engine/block_hash.h"
#include "engine/kv_block_manager.h"

using halo::engine::KvBlockManager;
using halo::engine::Sequence;

TEST(KvBlockManager, AllocatesWholeBlocksForTokens) {
  KvBlockManager m(8, 4);
  Sequence s;
  ASSERT_TRUE(m.allocate_slots(s, 5));
  EXPECT_EQ(s.block_table.size(), 2u);
  EXPECT_EQ(m.num_free_blocks(), 6);
  ASSERT_TRUE(m.allocate_slots(s, 8));  // still fits in 2 blocks
  EXPECT_EQ(s.block_table.size(), 2u);
  ASSERT_TRUE(m.allocate_slots(s, 9));
  EXPECT_EQ(s.block_table.size(), 3u);
}

TEST(KvBlockManager, RefusesWithoutChangingAnythingWhenFull) {
  KvBlockManager m(3, 4);
  Sequence a, b;
  ASSERT_TRUE(m.allocate_slots(a, 8));
  EXPECT_FALSE(m.allocate_slots(b, 8));
  EXPECT_TRUE(b.block_table.empty());
  EXPECT_EQ(m.num_free_blocks(), 1);
}

TEST(KvBlockManager, FreedBlocksAreReusedAndNeverShared) {
  KvBlockManager m(4, 2);
  Sequence a, b, c;
  ASSERT_TRUE(m.allocate_slots(a, 4));
  ASSERT_TRUE(m.allocate_slots(b, 4));
  EXPECT_EQ(m.num_free_blocks(), 0);
  EXPECT_FLOAT_EQ(m.usage(), 1.0f);
  m.free(a);
  EXPECT_TRUE(a.block_table.empty());
  ASSERT_TRUE(m.allocate_slots(c, 4));
  std::set<int32_t> used(b.block_table.begin(), b.block_table.end());
  for (int32_t blk : c.block_table) EXPECT_FALSE(used.count(blk)) << "block " << blk << " handed out twice";
}

TEST(KvBlockManager, RejectsEmptyPool) { EXPECT_THROW(KvBlockManager(0, 16), halo::Error); }

namespace {
Sequence seq_with(std::vector<int32_t> tokens) {
  Sequence s;
  s.prompt_ids = std::move(tokens);
  return s;
}
// Computes the whole sequence and registers its full blocks, as the engine does.
void compute_all(KvBlockManager& m, Sequence& s) {
  ASSERT_TRUE(m.allocate_slots(s, s.num_tokens()));
  s.num_computed_tokens = s.num_tokens();
  m.cache_full_blocks(s);
}
}  // namespace

TEST(PrefixCache, SharedPrefixReusesTheSameBlocks) {
  KvBlockManager m(16, 4, true);
  Sequence a = seq_with({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  compute_all(m, a);
  Sequence b = seq_with({1, 2, 3, 4, 5, 6, 7, 8, 42, 43, 44});
  EXPECT_EQ(m.attach_cached_prefix(b), 8);
  EXPECT_EQ(b.num_computed_tokens, 8);
  ASSERT_EQ(b.block_table.size(), 2u);
  EXPECT_EQ(b.block_table[0], a.block_table[0]);
  EXPECT_EQ(b.block_table[1], a.block_table[1]);
  // Shared blocks survive one owner leaving.
  int free_before = m.num_free_blocks();
  m.free(a);
  EXPECT_EQ(m.num_free_blocks(), free_before + 1);  // only a's private third block
}

TEST(PrefixCache, TheLastTokenIsAlwaysComputed) {
  KvBlockManager m(16, 4, true);
  Sequence a = seq_with({1, 2, 3, 4, 5, 6, 7, 8});
  compute_all(m, a);
  Sequence b = seq_with({1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(m.attach_cached_prefix(b), 4);  // not 8: logits need one computed token
}

TEST(PrefixCache, HashChainDependsOnEveryEarlierBlock) {
  KvBlockManager m(16, 4, true);
  Sequence a = seq_with({1, 2, 3, 4, 5, 6, 7, 8, 9});
  compute_all(m, a);
  Sequence b = seq_with({9, 9, 9, 9, 5, 6, 7, 8, 9});  // same second block, other first block
  EXPECT_EQ(m.attach_cached_prefix(b), 0);
}

TEST(PrefixCache, FreedBlocksStayReusableUntilEvictedLeastRecentlyFreedFirst) {
  KvBlockManager m(4, 4, true);
  Sequence a = seq_with({1, 2, 3, 4, 5});
  compute_all(m, a);  // blocks: [1,2,3,4] cached, [5] partial
  m.free(a);
  EXPECT_EQ(m.num_free_blocks(), 4);
  Sequence b = seq_with({1, 2, 3, 4, 6});
  EXPECT_EQ(m.attach_cached_prefix(b), 4) << "a freed cached block is still a hit";
  m.free(b);
  // Fill the pool with other work: the cached block is evicted only when needed.
  Sequence c = seq_with(std::vector<int32_t>(12, 7));
  ASSERT_TRUE(m.allocate_slots(c, 12));  // 3 of 4 blocks
  m.free(c);
  Sequence d = seq_with(std::vector<int32_t>(16, 8));
  ASSERT_TRUE(m.allocate_slots(d, 16));  // every block: the cached one must go
  m.free(d);
  Sequence e = seq_with({1, 2, 3, 4, 6});
  EXPECT_EQ(m.attach_cached_prefix(e), 0) << "evicted block must not be a hit";
}

TEST(PrefixCache, OffByDefault) {
  KvBlockManager m(16, 4);
  Sequence a = seq_with({1, 2, 3, 4, 5, 6, 7, 8, 9});
  compute_all(m, a);
  Sequence b = seq_with({1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(m.attach_cached_prefix(b), 0);
}

// ------------------------------------------------------------ fork (n / best_of)

namespace {
// A parent that computed `prompt_len` tokens, forked into a fresh child.
struct Forked {
  Sequence parent, child;
  KvBlockManager::BlockCopies copies;
  bool ok = false;
};
void fork_prompt(KvBlockManager& m, Forked& f, int prompt_len) {
  f.parent.prompt_ids.assign(prompt_len, 5);
  f.child.prompt_ids = f.parent.prompt_ids;
  compute_all(m, f.parent);
  f.ok = m.fork(f.parent, f.child, prompt_len, f.copies);
}
}  // namespace

TEST(KvFork, SharesWholeBlocksBeforeTheLastTokenAndCopiesItsBlock) {
  KvBlockManager m(8, 4);
  Forked f;
  fork_prompt(m, f, 10);  // blocks [0-3] [4-7] [8-9]: the last token is in the third
  ASSERT_TRUE(f.ok);
  ASSERT_EQ(f.child.block_table.size(), 3u);
  EXPECT_EQ(f.child.block_table[0], f.parent.block_table[0]);
  EXPECT_EQ(f.child.block_table[1], f.parent.block_table[1]);
  EXPECT_NE(f.child.block_table[2], f.parent.block_table[2]);
  EXPECT_EQ(f.copies.src, std::vector<int32_t>{f.parent.block_table[2]});
  EXPECT_EQ(f.copies.dst, std::vector<int32_t>{f.child.block_table[2]});
  EXPECT_EQ(f.child.num_computed_tokens, 9) << "the child recomputes only the last prompt token";
  EXPECT_EQ(m.num_free_blocks(), 8 - 4);
}

TEST(KvFork, AFullLastBlockIsCopiedNotShared) {
  // prompt_len = 8: the last token fills block 1, which the child must not share
  // (it writes that token again).
  KvBlockManager m(8, 4);
  Forked f;
  fork_prompt(m, f, 8);
  ASSERT_TRUE(f.ok);
  ASSERT_EQ(f.child.block_table.size(), 2u);
  EXPECT_EQ(f.child.block_table[0], f.parent.block_table[0]);
  EXPECT_EQ(f.copies.src, std::vector<int32_t>{f.parent.block_table[1]});
  EXPECT_EQ(f.copies.dst, std::vector<int32_t>{f.child.block_table[1]});
  EXPECT_EQ(f.child.num_computed_tokens, 7);
}

TEST(KvFork, ALastTokenOpeningABlockSharesEveryFullBlock) {
  KvBlockManager m(8, 4);
  Forked f;
  fork_prompt(m, f, 9);  // blocks [0-3] [4-7] [8]
  ASSERT_TRUE(f.ok);
  ASSERT_EQ(f.child.block_table.size(), 3u);
  EXPECT_EQ(f.child.block_table[0], f.parent.block_table[0]);
  EXPECT_EQ(f.child.block_table[1], f.parent.block_table[1]);
  EXPECT_EQ(f.copies.src, std::vector<int32_t>{f.parent.block_table[2]});
  EXPECT_EQ(f.child.num_computed_tokens, 8);
}

TEST(KvFork, OneTokenPromptSharesNothing) {
  KvBlockManager m(8, 4);
  Forked f;
  fork_prompt(m, f, 1);
  ASSERT_TRUE(f.ok);
  ASSERT_EQ(f.child.block_table.size(), 1u);
  EXPECT_NE(f.child.block_table[0], f.parent.block_table[0]);
  EXPECT_EQ(f.child.num_computed_tokens, 0);
}

TEST(KvFork, SharedBlocksLiveUntilTheirLastOwnerAndTheGrowingChildNeverWritesThem) {
  KvBlockManager m(8, 4);
  Forked f;
  fork_prompt(m, f, 10);
  ASSERT_TRUE(m.allocate_slots(f.child, 14));  // the child decodes past its copied block
  std::set<int32_t> parent(f.parent.block_table.begin(), f.parent.block_table.end());
  for (size_t i = 2; i < f.child.block_table.size(); ++i)
    EXPECT_FALSE(parent.count(f.child.block_table[i])) << "child block " << i << " is the parent's";
  m.free(f.parent);
  EXPECT_EQ(m.num_free_blocks(), 8 - 4) << "only the parent's private block returns";
  m.free(f.child);
  EXPECT_EQ(m.num_free_blocks(), 8);
}

TEST(KvFork, RefusesWithoutChangingAnythingWhenNoBlockIsFree) {
  KvBlockManager m(3, 4);
  Forked f;
  fork_prompt(m, f, 12);  // all three blocks
  EXPECT_FALSE(f.ok);
  EXPECT_TRUE(f.child.block_table.empty());
  EXPECT_TRUE(f.copies.src.empty());
  EXPECT_EQ(f.child.num_computed_tokens, 0);
  m.free(f.parent);
  EXPECT_EQ(m.num_free_blocks(), 3) << "a refused fork took a reference";
}

TEST(KvFork, RefusesAParentThatHasNotComputedThePrompt) {
  KvBlockManager m(8, 4);
  Sequence parent = seq_with({1, 2, 3, 4, 5, 6}), child = seq_with({1, 2, 3, 4, 5, 6});
  ASSERT_TRUE(m.allocate_slots(parent, 6));
  parent.num_computed_tokens = 4;  // a prefill chunk still to go
  KvBlockManager::BlockCopies copies;
  EXPECT_THROW(m.fork(parent, child, 6, copies), halo::Error);
}

TEST(KvFork, WithPrefixCachingTheChildContinuesTheParentsHashChain) {
  KvBlockManager m(8, 4, true);
  Forked f;
  fork_prompt(m, f, 9);
  ASSERT_TRUE(f.ok);
  ASSERT_EQ(f.child.block_hashes.size(), 2u);
  EXPECT_EQ(f.child.block_hashes, std::vector<uint64_t>(f.parent.block_hashes.begin(),
                                                        f.parent.block_hashes.begin() + 2));
  m.free(f.parent);
  m.free(f.child);
  EXPECT_EQ(m.num_free_blocks(), 8);
  Sequence again = seq_with(std::vector<int32_t>(9, 5));
  EXPECT_EQ(m.attach_cached_prefix(again), 8) << "the shared prompt blocks stay cached";
}

// ---- KV cache events (what llm-d's router replays) ----
using halo::engine::KvCacheEvent;

TEST(KvEvents, StoredRunsAreGroupedChainedAndRemovedOnEviction) {
  const uint64_t root = halo::engine::block_hash_root("", "m");
  KvBlockManager m(6, 2, true, root);
  m.enable_events();
  auto ev = m.take_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, KvCacheEvent::Kind::kAllBlocksCleared);

  Sequence a = seq_with({1, 2, 3, 4, 5});
  compute_all(m, a);  // two full blocks: one BlockStored with both
  ev = m.take_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, KvCacheEvent::Kind::kBlockStored);
  EXPECT_FALSE(ev[0].parent_block_hash.has_value());
  EXPECT_EQ(ev[0].token_ids, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(ev[0].block_size, 2);
  const std::vector<int32_t> b0{1, 2}, b1{3, 4};
  const uint64_t h0 = halo::engine::block_hash(root, b0);
  EXPECT_EQ(ev[0].block_hashes, (std::vector<uint64_t>{h0, halo::engine::block_hash(h0, b1)}));
  const auto a_hashes = ev[0].block_hashes;

  // A sequence sharing the first block stores only its own, chained to it.
  Sequence b = seq_with({1, 2, 9, 9, 9});
  EXPECT_EQ(m.attach_cached_prefix(b), 2);
  compute_all(m, b);
  ev = m.take_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].parent_block_hash, h0);
  EXPECT_EQ(ev[0].block_hashes.size(), 1u);
  m.free(a);
  m.free(b);
  EXPECT_TRUE(m.take_events().empty()) << "freeing keeps the blocks cached";

  // Taking every block evicts the three cached ones, each named once.
  Sequence c = seq_with(std::vector<int32_t>(12, 7));
  ASSERT_TRUE(m.allocate_slots(c, 12));
  ev = m.take_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, KvCacheEvent::Kind::kBlockRemoved);
  std::set<uint64_t> removed(ev[0].block_hashes.begin(), ev[0].block_hashes.end());
  EXPECT_EQ(removed.size(), 3u);
  EXPECT_TRUE(removed.count(a_hashes[0]) && removed.count(a_hashes[1]));
}

TEST(KvEvents, NoneWithoutPrefixCachingOrBeforeEnabled) {
  KvBlockManager off(4, 2);
  off.enable_events();
  Sequence a = seq_with({1, 2, 3, 4, 5});
  compute_all(off, a);
  EXPECT_TRUE(off.take_events().empty());
  KvBlockManager on(4, 2, true);
  Sequence b = seq_with({1, 2, 3, 4, 5});
  compute_all(on, b);
  EXPECT_TRUE(on.take_events().empty());
}

// The llm-d chain on a case worked by hand: CBOR [0, [1, 2], null] is
// 83 00 82 01 02 f6; its FNV-64a is fixed by the algorithm alone.
TEST(BlockHash, IsFnv64aOverCanonicalCbor) {
  uint64_t h = 14695981039346656037ull;
  for (uint8_t b : {0x83, 0x00, 0x82, 0x01, 0x02, 0xf6}) h = (h ^ b) * 1099511628211ull;
  const std::vector<int32_t> t{1, 2};
  EXPECT_EQ(halo::engine::block_hash(0, t), h);
  // Wider arguments take the shortest CBOR head: 1000 is 19 03 e8.
  uint64_t w = 14695981039346656037ull;
  for (uint8_t b : {0x83, 0x18, 0x2a, 0x81, 0x19, 0x03, 0xe8, 0xf6}) w = (w ^ b) * 1099511628211ull;
  const std::vector<int32_t> t2{1000};
  EXPECT_EQ(halo::engine::block_hash(42, t2), w);
}

TEST(KvTrim, GivesBackBlocksPastTheTokensFirstInLine) {
  KvBlockManager m(8, 4, /*prefix caching*/ true);
  Sequence a = seq_with({1, 2, 3, 4, 5, 6});
  compute_all(m, a);  // block 0 full and cached, block 1 partial
  ASSERT_TRUE(m.allocate_slots(a, 14));  // proposals reach into blocks 2 and 3
  ASSERT_EQ(a.block_table.size(), 4u);
  const std::set<int32_t> trimmed = {a.block_table[2], a.block_table[3]};
  const int free_before = m.num_free_blocks();
  m.trim(a, 7);  // accepted up to 7 tokens: blocks 0 and 1 stay
  EXPECT_EQ(a.block_table.size(), 2u);
  EXPECT_EQ(m.num_free_blocks(), free_before + 2);
  Sequence b;
  ASSERT_TRUE(m.allocate_slots(b, 1));
  EXPECT_TRUE(trimmed.count(b.block_table[0])) << "a trimmed block is handed out before older free ones";
  m.trim(a, 8);  // nothing past the end: unchanged
  EXPECT_EQ(a.block_table.size(), 2u);
}

TEST(KvTrim, RefusesToGiveBackACachedBlock) {
  KvBlockManager m(8, 4, true);
  Sequence a = seq_with({1, 2, 3, 4, 5, 6, 7, 8});
  compute_all(m, a);  // both blocks cached
  EXPECT_THROW(m.trim(a, 4), halo::Error);
}
