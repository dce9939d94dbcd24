// Issue 5's correctness comparisons on the GPU: the compiled programs (planned by the whole
// pipeline, run by runtime/executable.h) against LibTorch CUDA eager with the same weights and
// tokens, ctx 256: small, medium, large, xl (batch 4) and 2.7B (batch 2), fp32 and bf16
// (eager under CUDA autocast). Forward logits, the losses of 3 train_steps and every
// parameter after them within 1e-4 norm-wise relative (fp32) or 2e-2 (bf16); and 100 steps of
// small fp32 on one fixed batch, whose loss curve tracks eager's within 1e-3. Every measured
// error is printed, one line per (model, dtype, quantity). Skips without a CUDA device (for
// the runtime or for LibTorch).
#include <gtest/gtest.h>

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
  // AdamW's first steps move each weight by about +-lr whatever its gradient's size, so where
  // a gradient is near zero, rounding noise flips the step's sign: the weights' error is
  // roughly (update error) x (lr * steps / weight scale). On the CPU (interpreter vs LibTorch,
  // d_model 128) the updates already differ by 2e-4 at lr 1e-3; on 2.7B, where 3 steps of
  // 1e-3 are a quarter of a weight's scale, GPU noise would reach the f32 bound without any
  // bug. So f32 compares at lr 1e-4: three steps are ~0.5% of a linear weight's scale, so an
  // update 2% off reaches the bound and a wrong update is ~50x over it (the embedding, scale
  // 1: 3x). bf16 keeps the default 1e-3: its gradients differ by ~1e-2 anyway, and at 1e-4 a
  // wrong update would stay under its 2e-2 bound.
  c.adamw.lr = p.dtype == DType::bf16 ? 1e-3 : 1e-4;
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
  const LossCurves curves = lossCurves(c, onGpu());
  ASSERT_EQ(curves.compiled.size(), 100u);
  size_t worstStep = 0;
  for (size_t s = 0; s < curves.eager.size(); ++s) {
    std::printf("[small fp32 curve] step %zu: compiled %.6f eager %.6f\n", s + 1, curves.compiled[s], curves.eager[s]);
    if (std::fabs(curves.compiled[s] - curves.eager[s]) > std::fabs(curves.compiled[worstStep] - curves.eager[worstStep]))
      worstStep = s;
  }
  std::printf("[small fp32 curve] 100 steps: loss %.5f -> %.5f, max |compiled - eager| %.3g (step %zu)\n",
              curves.eager.front(), curves.eager.back(), curves.maxAbsDiff(), worstStep + 1);
  printTimes("small fp32 curve", curves.seconds);
  EXPECT_LT(curves.eager.back(), curves.eager.front() - 0.5) << "one batch repeated must be learnt";
  EXPECT_LE(curves.maxAbsDiff(), 1e-3) << "worst at step " << worstStep + 1;
}

}  // namespace
}  // namespace fusec::test
