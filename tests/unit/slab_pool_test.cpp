// support/slab_pool.h: blocks are carved densely from slabs, a freed block is the next one
// handed out, the slabs go back when the last block does; the IR's ops and values come from
// their pools (outside AddressSanitizer builds, which bypass them).
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "ir/graph.h"
#include "support/slab_pool.h"

namespace fusec {
namespace {

using Pool = SlabPool<40>;  // a size no IR class uses: this test owns the pool

TEST(SlabPool, CarvesDenseBlocksReusesFreedOnesAndReturnsTheSlabs) {
  ASSERT_EQ(Pool::live(), 0u);
  ASSERT_EQ(Pool::kBlock % alignof(std::max_align_t), 0u);
  const size_t perSlab = Pool::kSlabBytes / Pool::kBlock;
  std::vector<void*> blocks;
  for (size_t i = 0; i < perSlab + 3; ++i) blocks.push_back(Pool::allocate());
  EXPECT_EQ(Pool::live(), perSlab + 3);
  EXPECT_EQ(Pool::slabs(), 2u);
  // One slab's blocks are consecutive, kBlock apart.
  for (size_t i = 1; i < perSlab; ++i)
    EXPECT_EQ(reinterpret_cast<uintptr_t>(blocks[i]) - reinterpret_cast<uintptr_t>(blocks[i - 1]), Pool::kBlock) << i;
  EXPECT_EQ(std::set<void*>(blocks.begin(), blocks.end()).size(), blocks.size());
  // A released block is the next one handed out, before any fresh one.
  Pool::release(blocks[7]);
  EXPECT_EQ(Pool::allocate(), blocks[7]);
  for (void* b : blocks) Pool::release(b);
  EXPECT_EQ(Pool::live(), 0u);
  EXPECT_EQ(Pool::slabs(), 0u);  // all returned with the last block
  void* again = Pool::allocate();
  EXPECT_EQ(Pool::slabs(), 1u);
  Pool::release(again);
  EXPECT_EQ(Pool::slabs(), 0u);
}

// While a FreshBlocks lives, blocks come from the end of the slabs even with freed blocks
// waiting (passes/compact.cpp lays a graph out anew that way); after it, freed ones first again.
TEST(SlabPool, FreshBlocksSkipTheFreedOnes) {
  ASSERT_EQ(Pool::live(), 0u);
  std::vector<void*> blocks;
  for (int i = 0; i < 10; ++i) blocks.push_back(Pool::allocate());
  Pool::release(blocks[2]);
  Pool::release(blocks[5]);
  std::vector<void*> fresh;
  {
    Pool::FreshBlocks scope;
    for (int i = 0; i < 3; ++i) fresh.push_back(Pool::allocate());
  }
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(reinterpret_cast<uintptr_t>(fresh[size_t(i)]) - reinterpret_cast<uintptr_t>(blocks[9]),
              size_t(i + 1) * Pool::kBlock) << i;
  void* reused = Pool::allocate();
  EXPECT_TRUE(reused == blocks[2] || reused == blocks[5]);
  Pool::release(reused);
  for (int i : {0, 1, 3, 4, 6, 7, 8, 9}) Pool::release(blocks[size_t(i)]);
  for (void* b : fresh) Pool::release(b);
  EXPECT_EQ(Pool::live(), 0u);
  EXPECT_EQ(Pool::slabs(), 0u);
}

TEST(SlabPool, OpsAndValuesComeFromTheirPools) {
#ifdef FUSEC_SLAB_POOL_BYPASS
  GTEST_SKIP() << "AddressSanitizer build: ops and values come from the global allocator, so a use after free is reported";
#else
  const size_t ops = SlabPool<sizeof(Op)>::live(), values = SlabPool<sizeof(Value)>::live();
  {
    Graph g;
    for (int i = 0; i < 100; ++i) {
      auto op = makeOp(OpKind::Input);
      op->results.push_back(std::make_unique<Value>());
      op->results.back()->def = op.get();
      g.append(std::move(op));
    }
    EXPECT_EQ(SlabPool<sizeof(Op)>::live(), ops + 100);
    EXPECT_EQ(SlabPool<sizeof(Value)>::live(), values + 100);
  }
  EXPECT_EQ(SlabPool<sizeof(Op)>::live(), ops);
  EXPECT_EQ(SlabPool<sizeof(Value)>::live(), values);
#endif
}

}  // namespace
}  // namespace fusec
