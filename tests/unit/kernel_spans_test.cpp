// runtime/kernel_spans.h on the CPU: profiled kernels given to the launches that ran them (one
// kernel each, two for a split-K GEMM, none), in any record order, overlapping starts kept in
// the chain's order, and the refusals (another count, a span that ends before it starts).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "runtime/kernel_spans.h"
#include "test_util.h"

namespace fusec {
namespace {

using rt::KernelSpan;

TEST(KernelSpans, EachLaunchFromItsFirstStartToItsLastEnd) {
  // Launch 0: one kernel 1000..4000 ns; launch 1: a GEMM and its split-K reduction,
  // 5000..9000 and 9500..10000; launch 2: one kernel, 12000..12500.
  std::vector<KernelSpan> spans{{1000, 4000}, {5000, 9000}, {9500, 10000}, {12000, 12500}};
  std::vector<float> ms = rt::launchTimesFromSpans(spans, {1, 2, 1});
  ASSERT_EQ(ms.size(), 3u);
  EXPECT_FLOAT_EQ(ms[0], 0.003f);
  EXPECT_FLOAT_EQ(ms[1], 0.005f);  // the gap between its two kernels counts, the one before it does not
  EXPECT_FLOAT_EQ(ms[2], 0.0005f);
}

TEST(KernelSpans, RecordOrderDoesNotMatter) {
  std::vector<KernelSpan> spans;
  std::vector<int> kernels;
  std::mt19937 rng(3);
  uint64_t t = 0;
  for (int i = 0; i < 50; ++i) {
    kernels.push_back(1 + i % 3);
    for (int k = 0; k < kernels.back(); ++k) {
      const uint64_t d = 100 + rng() % 5000;
      spans.push_back({t, t + d});
      t += d + rng() % 3000;
    }
  }
  const std::vector<float> inOrder = rt::launchTimesFromSpans(spans, kernels);
  std::shuffle(spans.begin(), spans.end(), rng);
  EXPECT_EQ(rt::launchTimesFromSpans(spans, kernels), inOrder);
}

TEST(KernelSpans, AKernelThatStartsBeforeItsPredecessorEndsStaysInChainOrder) {
  // Programmatic dependent launch: launch 1's kernel starts while launch 0's still runs, and
  // waits for it; that wait is launch 0's time, not launch 1's.
  std::vector<KernelSpan> spans{{2000, 6000}, {1000, 5000}};
  std::vector<float> ms = rt::launchTimesFromSpans(spans, {1, 1});
  EXPECT_FLOAT_EQ(ms[0], 0.004f);
  EXPECT_FLOAT_EQ(ms[1], 0.001f);
}

TEST(KernelSpans, DependentLaunchesAddUpToTheChain) {
  // Three launches, each starting before the one before it ends; the second runs two kernels.
  // Their times add up to the chain's first start to last end, 10 us.
  std::vector<KernelSpan> spans{{0, 4000}, {3000, 5000}, {5000, 7000}, {6500, 10000}};
  std::vector<float> ms = rt::launchTimesFromSpans(spans, {1, 2, 1});
  EXPECT_FLOAT_EQ(ms[0], 0.004f);
  EXPECT_FLOAT_EQ(ms[1], 0.003f);
  EXPECT_FLOAT_EQ(ms[2], 0.003f);
  EXPECT_FLOAT_EQ(ms[0] + ms[1] + ms[2], 0.010f);
}

TEST(KernelSpans, ALaunchOfNoKernelTakesNoTime) {
  std::vector<float> ms = rt::launchTimesFromSpans({{0, 1000}, {2000, 3000}}, {1, 0, 1});
  EXPECT_EQ(ms, (std::vector<float>{0.001f, 0.0f, 0.001f}));
}

TEST(KernelSpans, RefusesSpansThatAreNotTheLaunches) {
  test::expectError([] { rt::launchTimesFromSpans({{0, 10}, {20, 30}}, {1, 2}); },
                    "the profiler recorded 2 kernels for a run of 2 launches that run 3");
  test::expectError([] { rt::launchTimesFromSpans({{0, 10}, {30, 20}}, {1, 1}); }, "ends before it starts");
}

TEST(KernelSpans, CollectivesMapToTheirOwnLaunchesBesideTheCompute) {
  // Launches: compute, collective, compute, collective. The first collective runs during the
  // second compute launch, so ordering all spans by start would mix the two streams up.
  std::vector<KernelSpan> spans{{0, 1000}, {1200, 5000}, {1100, 2000, true}, {5100, 5600, true}};
  const std::vector<float> ms = rt::launchTimesFromSpans(spans, {1, 1, 1, 1}, {false, true, false, true});
  ASSERT_EQ(ms.size(), 4u);
  EXPECT_FLOAT_EQ(ms[0], 0.001f);
  EXPECT_FLOAT_EQ(ms[1], 0.0009f);
  EXPECT_FLOAT_EQ(ms[2], 0.0038f);
  EXPECT_FLOAT_EQ(ms[3], 0.0005f);
  EXPECT_THROW(rt::launchTimesFromSpans(spans, {1, 1, 1, 1}, {false, false, false, true}), Error)
      << "three compute spans are not two compute launches' kernels";
}

TEST(KernelSpans, ExposedCommunicationIsCollectiveTimeNoComputeHides) {
  // Compute busy [0,10) and [12,20); collectives [8,14) and [19,25): of their 12, [10,12) and
  // [20,25) run alone.
  std::vector<KernelSpan> spans{{0, 6}, {5, 10}, {12, 20}, {8, 14, true}, {19, 25, true}};
  for (auto& s : spans) s.start *= 1000000, s.end *= 1000000;  // ms in ns
  const rt::StepOverlap o = rt::stepOverlap(spans);
  EXPECT_DOUBLE_EQ(o.stepMs, 25);
  EXPECT_DOUBLE_EQ(o.computeMs, 18);
  EXPECT_DOUBLE_EQ(o.commMs, 12);
  EXPECT_DOUBLE_EQ(o.exposedCommMs, 7);
  EXPECT_EQ(rt::stepOverlap({}).stepMs, 0);
  EXPECT_TRUE(rt::isCommKernelName("ncclDevKernel_AllReduce_Sum_f32_RING_LL"));
  EXPECT_TRUE(rt::isCommKernelName("_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE"));
  EXPECT_FALSE(rt::isCommKernelName("row_reduce_3_rmsnorm"));
}

}  // namespace
}  // namespace fusec
