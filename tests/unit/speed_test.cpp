// Compile-time cost of the pipeline on the largest preset, and the merge-gemms reach bound
// that keeps it fast (passes/merge_gemms.cpp "interdependent").
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "frontend/models/transformer.h"
#include "ir/parser.h"
#include "ir/verifier.h"
#include "passes/launch_stats.h"
#include "passes/pass.h"
#include "passes/pass_manager.h"
#include "api/compile.h"
#include "passes/pipeline.h"
#include "test_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define FUSEC_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUSEC_SANITIZED 1
#endif
#endif

namespace fusec {
namespace {

// `fusec compile --model NAME --program train_step` without the CLI: trace, program passes,
// default pipeline, verification after each pass. Returns the module; `passMs` the time
// spent in the pass manager.
std::unique_ptr<Module> compileTrainStep(const std::string& model, int64_t batch, int64_t ctx, double* passMs = nullptr) {
  auto m = std::make_unique<Module>();
  models::buildTrainLoss(*m, models::namedConfig(model), batch, ctx);
  PassManagerOptions opts;
  opts.verifyEach = true;
  auto t0 = std::chrono::steady_clock::now();
  api::lowerProgram(*m, "train_step", {.dtype = DType::f32, .passManager = opts});
  if (passMs) *passMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

// The merges themselves are fixed by these counts (docs: Q/K/V and W1/W3 forward and
// backward); a faster dependency search must not change them.
TEST(Speed, MediumGemmCountUnchanged) { EXPECT_EQ(launchStats(*compileTrainStep("medium", 2, 16)).gemms, 435); }

// xl train_step at batch 4, ctx 256 took ~0.65 s in a RelWithDebInfo build before the
// program passes, merge-gemms and the verifier were made linear, ~0.2 s after; 3 s is the
// requirement and leaves room for a loaded machine or a Debug build.
TEST(Speed, XlTrainStepPipelineWithinBudget) {
#ifdef FUSEC_SANITIZED
  GTEST_SKIP() << "timing budget not meaningful under AddressSanitizer";
#else
  double passMs = 0;
  auto t0 = std::chrono::steady_clock::now();
  auto m = compileTrainStep("xl", 4, 256, &passMs);
  auto t1 = std::chrono::steady_clock::now();
  const LaunchStats s = launchStats(*m);
  auto t2 = std::chrono::steady_clock::now();
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  std::printf("[ info ] xl train_step: trace+passes %.0f ms (passes+verify %.0f ms), launch stats %.0f ms\n",
              ms(t1 - t0), passMs, ms(t2 - t1));
  EXPECT_EQ(s.gemms, 867);
  EXPECT_LT(ms(t1 - t0), 3000.0);
  EXPECT_LT(ms(t2 - t1), 500.0);
#endif
}

// The .fir case where a merge creates the only path between two later candidates: merged
// anyway, they would form a cycle. Same results on random non-zero inputs, and %na, %nb
// stay separate GEMMs beside the merged one.
TEST(Speed, MergeGemmsReachSeesPathsThroughEarlierMerges) {
  auto m = parseFile(std::string(FUSEC_SOURCE_DIR) + "/tests/lit/passes/merge-gemms-reach.fir");
  auto before = cloneModule(*m);
  ASSERT_TRUE(createPass("merge-gemms")->run(*m));
  ASSERT_NO_THROW(verify(*m));
  const Graph& g = *m->funcs[0];
  EXPECT_EQ(std::count_if(g.ops.begin(), g.ops.end(), [](auto& op) { return op->kind == OpKind::Matmul; }), 3);

  std::mt19937 rng(11);
  std::uniform_real_distribution<double> mag(0.1, 0.5);
  Bindings env;
  for (Op* in : before->funcs[0]->inputs()) {
    HostTensor h = HostTensor::zeros(in->result()->type);
    for (size_t k = 0; k < h.size(); ++k) h.set(k, (rng() % 2 ? 1 : -1) * mag(rng));
    env[in->attrStr("name")] = std::move(h);
  }
  auto want = interpret(*before->funcs[0], env), got = interpret(g, env);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    for (size_t k = 0; k < want[i].size(); ++k)
      EXPECT_NEAR(got[i].get(k), want[i].get(k), 1e-6 * std::max(1.0, std::fabs(want[i].get(k)))) << "output " << i;
}

}  // namespace
}  // namespace fusec
