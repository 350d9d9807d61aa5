#include <gtest/gtest.h>

#include <set>

#include "common/error.h"
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
