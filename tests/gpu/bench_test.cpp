// fusec bench on the device: the ceilings, the event timer, and a real sweep of the small model
// whose every row must be OK; without a device, the one-line "no CUDA device" (this part
// runs in CI).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <sstream>
#include <string>
#include <sys/wait.h>

#include "bench/ceilings.h"
#include "bench/report.h"
#include "bench/stats.h"
#include "bench/timer.h"
#include "runtime/device.h"
#include "run_fusec.h"

namespace fusec {
namespace {

using test::runFusec;


TEST(Bench, NoDeviceFailsFast) {
  if (rt::deviceAvailable()) GTEST_SKIP() << "a CUDA device is present";
  auto [out, rc] = runFusec("bench --model small --passes step");
  EXPECT_EQ(out, "error: no CUDA device\n");
  EXPECT_EQ(rc, 1);
}

TEST(Bench, CeilingsAndTimer) {
  std::string why;
  if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  bench::Ceilings c = bench::measureCeilings(2, 5);
  std::printf("ceilings: bf16 %.1f TFLOP/s, f32 %.1f TFLOP/s, copy %.0f GB/s\n", c.bf16Tflops, c.f32Tflops, c.copyGBps);
  // Hopper: bf16 tensor cores are several times strict f32; both far above zero and below the
  // datasheet (989 / 67 TFLOP/s dense on H100 SXM), copy below 4.8 TB/s x 2 (read + write).
  EXPECT_GT(c.bf16Tflops, 3 * c.f32Tflops);
  EXPECT_LT(c.bf16Tflops, 1000);
  EXPECT_GT(c.f32Tflops, 10);
  EXPECT_GT(c.copyGBps, 500);
  EXPECT_LT(c.copyGBps, 10000);

  // Twice the bytes takes about twice the time: the events bracket the work, not the launch.
  rt::DeviceBuffer src(size_t(512) << 20), dst(size_t(512) << 20);
  auto copy = [&](size_t bytes) {
    return bench::summarize(bench::timeOnStream(
                                [&] { FUSEC_CUDA(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, nullptr), "test"); },
                                nullptr, 2, 5))
        .median;
  };
  const double small = copy(size_t(128) << 20), large = copy(size_t(512) << 20);
  EXPECT_GT(large / small, 3.0) << small << " ms vs " << large << " ms";
  EXPECT_LT(large / small, 5.0) << small << " ms vs " << large << " ms";
}

// The whole command on the small model at a short context: every row OK, compiled faster
// than eager on each, memory and MFU filled in.
TEST(Bench, SmallModelSweep) {
  std::string why;
  if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  if (!test::eagerWorkerBuilt(&why)) GTEST_SKIP() << why;
  auto [out, rc] = runFusec(
      "bench --model small --ctx 128 --batch 2 --dtype fp32,bf16 --passes forward,fwd_bwd,step --warmup 2 --iters 3 "
      "--format json");
  std::printf("%s", out.c_str());
  ASSERT_EQ(rc, 0) << out;
  std::istringstream lines(out);
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') continue;  // progress lines
    bench::BenchRow r = bench::parseJsonRow(line);
    ++rows;
    EXPECT_EQ(r.status, "OK") << line;
    if (!r.ok()) continue;
    EXPECT_GT(r.ms->median, 0) << line;
    ASSERT_TRUE(r.mfu()) << line;
    EXPECT_GT(*r.mfu(), 0) << line;
    EXPECT_LT(*r.mfu(), 1) << line;
    if (r.impl == "compiled") {
      EXPECT_GT(r.arenaBytes.value_or(0), 0) << line;
      EXPECT_GT(r.residentBytes.value_or(0), 0) << line;
      ASSERT_TRUE(r.speedup) << line;
      EXPECT_GT(*r.speedup, 1) << "compiled slower than eager: " << line;
    } else {
      EXPECT_GT(r.allocatedBytes.value_or(0), 0) << line;
    }
  }
  EXPECT_EQ(rows, 2 * 3 * 2);
}

}  // namespace
}  // namespace fusec
