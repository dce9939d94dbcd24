// Correctness against eager PyTorch on the GPU: the compiled programs (planned by the whole
// pipeline, run by runtime/executable.h) against LibTorch CUDA eager with the same weights and
// tokens, ctx 256: small, medium, large, xl (batch 4) and 2.7B (batch 2), fp32 and bf16
// (eager under CUDA autocast). Forward logits, the losses of 3 train_steps and every
// parameter after them within 1e-4 norm-wise relative (fp32) or 2e-2 (bf16); and 100 steps of
// small fp32 on fixed random data (a fresh uniform random batch each step, the same for
// both), whose loss curve tracks eager's within 1e-3 over 50 steps, and over 100 within the
// larger of 1e-3 and twice its drift from itself under other GEMM algorithms. Every measured
// error is printed, one line per (model, dtype, quantity). Skips without a CUDA device (for
// the runtime or for LibTorch).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "bench/eager_model.h"
#include "eager_comparison.h"
#include "gpu/executable_runner.h"
#include "runtime/device.h"

namespace fusec::test {
namespace {

// Why the comparisons cannot run here, or "" when they can.
std::string gpuMissing() {
  std::string why;
  if (!rt::deviceAvailable(&why)) return "runtime: " + why;
  if (!bench::torchCudaAvailable(&why)) return why;
  return "";
}

RunnerFactory onGpu() {
  return [](const Graph& g) { return executableRunner(g); };
}

struct SizeCase {
  std::string model;
  int64_t batch;
  DType dtype;
};
// ctest shows a parameter as gtest prints it: its fields, not a dump of the struct's bytes.
void PrintTo(const SizeCase& c, std::ostream* os) { *os << c.model << " b" << c.batch << " " << dtypeName(c.dtype); }

std::vector<SizeCase> sizeCases() {
  std::vector<SizeCase> out;
  for (DType d : {DType::f32, DType::bf16})
    for (const char* m : {"small", "medium", "large", "xl", "2.7B"})
      out.push_back({m, std::string(m) == "2.7B" ? 2 : 4, d});
  return out;
}

std::string caseName(const ::testing::TestParamInfo<SizeCase>& info) {
  std::string n = info.param.model + (info.param.dtype == DType::bf16 ? "_bf16" : "_fp32");
  for (char& ch : n)
    if (ch == '.') ch = '_';  // gtest names are identifiers: 2.7B -> 2_7B
  return n;
}

class CompiledVsEager : public ::testing::TestWithParam<SizeCase> {
 protected:
  void SetUp() override {
    if (std::string why = gpuMissing(); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_P(CompiledVsEager, ForwardAndThreeTrainSteps) {
  const SizeCase& p = GetParam();
  ComparisonCase c;
  c.cfg = models::namedConfig(p.model);
  c.dtype = p.dtype;
  c.batch = p.batch;
  c.seq = 256;
  c.steps = 3;
  c.eagerDevice = "cuda";
  // The default AdamW config (lr 1e-3) in both dtypes, as users train. "Parameter updates"
  // are compared as the parameters after the 3 updates: W3 - W0 itself cannot be compared at
  // 1e-4, because for weights of scale 1 (norm weights, embeddings) three steps of ~1e-3 are
  // resolved only to f32's ulp(1) ~ 6e-8 per step in BOTH implementations (printed as the
  // update's error, for information).
  const double bound = p.dtype == DType::bf16 ? 2e-2 : 1e-4;
  const ComparisonResult r = compareWithEager(c, onGpu());
  printComparison(c, r);
  const std::string at = c.label() + ": ";
  EXPECT_LE(r.logits, bound) << at << "logits";
  for (size_t s = 0; s < r.lossErrors.size(); ++s)
    EXPECT_LE(r.lossErrors[s], bound) << at << "loss at step " << s + 1 << ": compiled " << r.compiledLosses[s]
                                      << ", eager " << r.eagerLosses[s];
  ASSERT_EQ(r.params.size(), models::parameterSpecs(c.cfg).size());
  for (const ParamError& e : r.params)
    EXPECT_LE(e.weights, bound) << at << e.name << " after " << c.steps << " steps (its update's error: " << e.update
                                << ")";
}

INSTANTIATE_TEST_SUITE_P(Sizes, CompiledVsEager, ::testing::ValuesIn(sizeCases()), caseName);

TEST(CompiledVsEagerCurve, Small100StepsFp32) {
  if (std::string why = gpuMissing(); !why.empty()) GTEST_SKIP() << why;
  ComparisonCase c;
  c.cfg = models::namedConfig("small");
  c.batch = 4;
  c.seq = 256;
  c.steps = 100;
  c.eagerDevice = "cuda";
  // A fresh uniform random batch every step. Where training is unstable, 1e-7 differences
  // grow ~2x per step in any two f32 implementations, and 100 steps cannot track to 1e-3:
  // measured on an H200, one batch repeated (memorised within ~20 steps) reached 2.1e-3 at
  // step 14, and a learnable random bigram chain, whose loss spikes at lr 1e-3, 1.17 by step 42.
  // Even this stable curve amplifies rounding slowly (~1e-5 by step 20, ~1e-4 by step 50,
  // ~1e-3 by step 90): the same compiled program with cuBLASLt's heuristic GEMM algorithms
  // instead of the autotuned ones (`reordered`: nothing changes but f32 summation orders)
  // ended 1.3e-3 away from itself on an H200. So the curve is compared twice:
  //   * steps 1-50, before the amplification reaches the bound: within 1e-3 of eager;
  //   * all 100 steps: within 1e-3 of eager, or within twice the distance between the two
  //     compiled runs, whichever is larger (no closer to eager than to itself is asked for).
  const LossCurves curves = lossCurves(c, onGpu(), CurveData::UniformStream,
                                       [](const Graph& g) { return executableRunner(g, /*gemmAutotune=*/false); });
  ASSERT_EQ(curves.compiled.size(), 100u);
  ASSERT_EQ(curves.reordered.size(), 100u);
  size_t worstStep = 0;
  double worstEarly = 0;
  for (size_t s = 0; s < curves.eager.size(); ++s) {
    std::printf("[small fp32 curve] step %zu: compiled %.6f reordered %.6f eager %.6f\n", s + 1, curves.compiled[s],
                curves.reordered[s], curves.eager[s]);
    const double d = std::fabs(curves.compiled[s] - curves.eager[s]);
    if (d > std::fabs(curves.compiled[worstStep] - curves.eager[worstStep])) worstStep = s;
    if (s < 50) worstEarly = std::max(worstEarly, d);
  }
  const double floor = curves.maxReorderedDiff();
  const double bound = std::max(1e-3, 2 * floor);
  std::printf("[small fp32 curve] 100 steps: loss %.5f -> %.5f, max |compiled - eager| %.3g (step %zu), "
              "steps 1-50 %.3g; max |compiled - reordered| %.3g, so the bound is %.3g\n",
              curves.eager.front(), curves.eager.back(), curves.maxAbsDiff(), worstStep + 1, worstEarly, floor, bound);
  printTimes("small fp32 curve", curves.seconds);
  // Not a flat line: the curve moves by far more than the bound (9.28 to 9.46 and back).
  const auto [lo, hi] = std::minmax_element(curves.eager.begin(), curves.eager.end());
  EXPECT_GT(*hi - *lo, 0.05) << "the loss curve must move";
  EXPECT_LE(worstEarly, 1e-3) << "steps 1-50";
  EXPECT_LE(curves.maxAbsDiff(), bound) << "worst at step " << worstStep + 1;
}

}  // namespace
}  // namespace fusec::test
