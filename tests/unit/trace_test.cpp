// `fusec profile --trace` on the CPU: the Chrome trace of tiny's forward and train_step, planned
// here, with random launch times (trace_checks.h: the schema, one slice per launch in order,
// a program and a CUDA-graph slice per program, the host's phases).
#include <nlohmann/json.hpp>
#include <random>

#include "bench/trace.h"
#include "random_profile.h"
#include "test_util.h"
#include "trace_checks.h"

namespace fusec {
namespace {

// bf16 with fused attention, as a GPU step runs; the passes as the host phases, and NVRTC.
bench::ProgramProfile plannedProfile(const char* program, bench::BenchPass pass, std::mt19937& rng) {
  bench::ProgramProfile p = test::randomProfile(program, pass, rng, DType::bf16, AttentionLowering::Fused);
  p.host.push_back({"NVRTC and load kernels", 12.5});
  return p;
}

TEST(ChromeTrace, OneSlicePerLaunchWithItsArguments) {
  std::mt19937 rng(3);
  std::vector<bench::ProgramProfile> ps = {plannedProfile("forward", bench::BenchPass::Forward, rng),
                                           plannedProfile("train_step", bench::BenchPass::Step, rng)};
  const nlohmann::json j = nlohmann::json::parse(bench::chromeTrace("tiny bf16", ps));
  test::checkChromeTrace(j, {{"forward", ps[0].launches.size()}, {"train_step", ps[1].launches.size()}});
  // The arguments are the profile's: a backward launch of a layer, its bytes and GB/s.
  bool sawBackwardLayer = false;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X" && e["pid"] == 2 && e["tid"] == 2 && e["args"]["phase"] == "backward" &&
        e["args"]["layer"].get<int>() >= 0) {
      sawBackwardLayer = true;
      const double gbps = double(e["args"]["bytes"].get<int64_t>()) / (e["dur"].get<double>() * 1e3);
      EXPECT_NEAR(e["args"]["GB/s"].get<double>(), gbps, 1e-6 * gbps);
    }
  EXPECT_TRUE(sawBackwardLayer);
}

TEST(ChromeTrace, MisalignedTimesAreAnInternalError) {
  std::mt19937 rng(3);
  std::vector<bench::ProgramProfile> ps = {plannedProfile("forward", bench::BenchPass::Forward, rng)};
  ps[0].ms.pop_back();
  EXPECT_NE(test::errorOf([&] { bench::chromeTrace("x", ps); }).find("internal: the trace of forward has"),
            std::string::npos);
}

}  // namespace
}  // namespace fusec
