// runtime/side_stream_waits.h: which side-stream kernel (AdamW's updates, ir/side_stream.h)
// each later compute launch waits for. Every hazard between the two streams must be ordered,
// and nothing else: a wait on a kernel whose memory a launch never touches would put that
// kernel back on the critical path.
#include <gtest/gtest.h>

#include "runtime/side_stream_waits.h"

namespace fusec::rt {
namespace {

LaunchAccess compute(std::vector<Span> reads, std::vector<Span> writes) { return {false, std::move(reads), std::move(writes)}; }
LaunchAccess side(std::vector<Span> reads, std::vector<Span> writes) { return {true, std::move(reads), std::move(writes)}; }

TEST(SideStreamWaits, OrdersEveryHazardAndNothingElse) {
  // The update reads a gradient at [100, 200) and a weight at [1000, 1100), which it writes.
  const LaunchAccess update = side({{100, 200}, {1000, 1100}}, {{1000, 1100}});
  const std::vector<LaunchAccess> list = {
      compute({}, {{100, 200}}),            // 0: makes the gradient (before the update: no wait)
      update,                               // 1
      compute({{100, 200}}, {{300, 400}}),  // 2: reads what the update only reads: no wait
      compute({{0, 50}}, {{150, 160}}),     // 3: reuses the gradient's bytes: waits for 1
      compute({{1050, 1060}}, {{500, 600}}),  // 4: reads the weight: 1 is already waited for
  };
  EXPECT_EQ(sideStreamWaits(list), (std::vector<long>{-1, -1, -1, 1, -1}));
  // A read of what the update writes, and a write of it, wait too.
  EXPECT_EQ(sideStreamWaits({update, compute({{1099, 1200}}, {{5000, 5001}})}), (std::vector<long>{-1, 0}));
  EXPECT_EQ(sideStreamWaits({update, compute({}, {{900, 1001}})}), (std::vector<long>{-1, 0}));
  // Touching spans, not overlapping ones: no wait.
  EXPECT_EQ(sideStreamWaits({update, compute({{200, 300}}, {{0, 100}, {1100, 1200}})}), (std::vector<long>{-1, -1}));
}

// The side stream runs in order: a wait for the last conflicting kernel covers the ones before
// it, and a later launch that conflicts with one of those waits for nothing more.
TEST(SideStreamWaits, TheLastConflictCoversTheKernelsBeforeIt) {
  const std::vector<LaunchAccess> list = {
      side({{0, 10}}, {{0, 10}}),      // 0
      side({{20, 30}}, {{20, 30}}),    // 1
      side({{40, 50}}, {{40, 50}}),    // 2
      compute({}, {{25, 26}}),         // 3: conflicts with 1, so 0 and 1 are done
      compute({}, {{5, 6}}),           // 4: 0 was covered by 3's wait
      compute({}, {{45, 46}}),         // 5: waits for 2
      compute({}, {{45, 46}}),         // 6: already covered
  };
  EXPECT_EQ(sideStreamWaits(list), (std::vector<long>{-1, -1, -1, 1, -1, 2, -1}));
}

}  // namespace
}  // namespace fusec::rt
