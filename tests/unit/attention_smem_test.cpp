// codegen/attention_smem.h: the attention launches' shared memory, laid out once.
#include <gtest/gtest.h>

#include "codegen/attention_smem.h"
#include "codegen/body_emitter.h"
#include "ir/error.h"

namespace fusec::codegen {
namespace {

TEST(AttentionSmem, ArraysFollowEachOtherAndTheLaunchAsksForTheBaseSlack) {
  // wgmma, d 128, two warpgroups (128 rows), key tile 128: q, then two buffers of k and of v.
  const auto wg = wgmmaSmemLayouts({128, 128, 2, 128, 128, 64, false});
  ASSERT_EQ(wg.size(), 3u);
  EXPECT_EQ(wg[0].launch, "WG_FWD");
  ASSERT_EQ(wg[0].arrays.size(), 3u);
  EXPECT_EQ(wg[0].arrays[1].offset, 128 * 128 * 2);
  EXPECT_EQ(wg[0].arrays[2].offset, 128 * 128 * 2 + 2 * 128 * 128 * 2);
  EXPECT_EQ(wg[0].bytes(), 1024 + 128 * 128 * 2 * 5);  // the lit test's 164864
  // mma.sync, d 64 bf16: rows padded by 16 bytes; dQ with an o tile has no statistics arrays.
  const auto mma = mmaSmemLayouts({64, 64, 2, 64, 64, 64, true});
  EXPECT_EQ(mma[1].arrays.size(), 5u);
  EXPECT_EQ(mma[1].arrays[2].name, "O");
  EXPECT_EQ(mma[0].bytes(), (64 * 72 + 2 * 64 * 72 * 2) * 2);
  EXPECT_EQ(mmaSmemLayouts({64, 64, 2, 64, 64, 64, false})[1].arrays.back().name, "L2");
}

TEST(AttentionSmem, TheProducerKernelsHaveTheirRingsAndBarriers) {
  // d 128, key tile 128, three buffers: q, three k and three v tiles, then 4 x 3 mbarriers,
  // within the 227 KB a block may opt into (the generator's producer takes two today).
  AttentionTiles t{128, 128, 2, 128, 128, 64, false, 3};
  const auto wg = wgmmaSmemLayouts(t);
  ASSERT_EQ(wg.size(), 5u);
  EXPECT_EQ(wg[3].launch, "WG_FWS");
  ASSERT_EQ(wg[3].arrays.size(), 4u);
  EXPECT_EQ(wg[3].arrays[2].offset, 4 * 128 * 128 * 2);
  EXPECT_EQ(wg[3].arrays[3].name, "BAR");
  EXPECT_EQ(wg[3].arrays[3].offset, 7 * 128 * 128 * 2);
  EXPECT_EQ(wg[3].bytes(), 1024 + 7 * 128 * 128 * 2 + 96);
  EXPECT_LE(wg[3].bytes(), 227 * 1024);
  // dK/dV: its k and v rows, three q and three dO tiles of 64 queries, their row statistics
  // (a float2 a query), then 2 x 3 mbarriers.
  EXPECT_EQ(wg[4].launch, "WG_DKS");
  ASSERT_EQ(wg[4].arrays.size(), 6u);
  EXPECT_EQ(wg[4].arrays[4].name, "RS");
  EXPECT_EQ(wg[4].arrays[4].offset, 2 * 128 * 128 * 2 + 6 * 64 * 128 * 2);
  EXPECT_EQ(wg[4].arrays[5].offset, wg[4].arrays[4].offset + 3 * 64 * 8);
  EXPECT_EQ(wg[4].bytes(), 1024 + wg[4].arrays[5].offset + 48);
  t.producerStages = 0;  // no producer: the three launches alone
  EXPECT_EQ(wgmmaSmemLayouts(t).size(), 3u);
}

TEST(AttentionSmem, AMisalignedArrayIsRefused) {
  SmemLayout l;
  l.launch = "WG_FWD";
  l.add("Q", 1000, 1024);
  EXPECT_THROW(l.add("K", 2048, 1024), Error);  // would start at byte 1000
  SmemLayout ok;
  ok.add("A", 48).add("B", 16);
  EXPECT_EQ(ok.arrays[1].offset, 48);
  EXPECT_EQ(ok.bytes(), 64);
}

TEST(AttentionSmem, SimtAndTf32LaunchesKeepTheirSizes) {
  // The sizes the generator computed before the layouts were listed (f32 tiles of 64 rows,
  // padded by 4 floats): d 24 forward, dQ, dK/dV.
  const auto simt = simtSmemLayouts(24, 24, 64);
  EXPECT_EQ(simt[0].bytes(), (64 * 28 * 2 + 64 * 28 + 64 * 68) * 4);
  EXPECT_EQ(simt[1].bytes(), (64 * 56 * 2 + 64 * 68 + 2 * 64) * 4);
  EXPECT_EQ(simt[2].bytes(), (64 * 56 * 2 + 2 * 64 * 68 + 2 * 64) * 4);
  // 3xTF32 at d 64 (f32 tiles padded by 4 floats), 64 rows, key tile 64: the lit test's 87040.
  EXPECT_EQ(mmaSmemLayouts({64, 64, 4, 64, 64, 64, true})[0].bytes(), 87040);
}

TEST(AttentionSmem, MacrosNameEveryArray) {
  KernelBuilder w;
  for (const SmemLayout& l : simtSmemLayouts(24, 24, 64)) writeSmemMacros(w, l);
  const std::string s = w.str();
  EXPECT_NE(s.find("#define FA_SMEM_FWD_P "), std::string::npos);
  EXPECT_NE(s.find("#define FA_SMEM_DKDV_L2 "), std::string::npos);
  EXPECT_EQ(s.find("FA_SMEM_WG_"), std::string::npos);
}

}  // namespace
}  // namespace fusec::codegen
