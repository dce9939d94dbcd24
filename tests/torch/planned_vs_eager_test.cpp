// The comparison harness of the GPU tests (eager_comparison.h) on the CPU: the fully planned
// `tiny` programs (fused kernels over a memory plan) run by the interpreter against the eager
// model on the CPU, fp32. It proves the harness (same weights and tokens on both sides, loss
// output found, state carried across steps, every parameter compared) and that it sees a
// wrong program; and bf16 eager's one-line error off CUDA.
#include <gtest/gtest.h>

#include "bench/eager_model.h"
#include "eager_comparison.h"
#include "frontend/init.h"

using namespace fusec;
using namespace fusec::test;

namespace {

ComparisonCase tinyCase() {
  ComparisonCase c;
  c.cfg = models::namedConfig("tiny");
  c.batch = 2;
  c.seq = 7;  // odd, below ctx 16
  c.eagerDevice = "cpu";
  c.adamw.lr = 1e-2;  // large enough that three steps move every weight visibly
  return c;
}

RunnerFactory interpreter() {
  return [](const Graph& g) { return interpreterRunner(g); };
}

TEST(PlannedVsEager, TinyForwardAndThreeStepsFp32) {
  const ComparisonCase c = tinyCase();
  ComparisonResult r = compareWithEager(c, interpreter());
  printComparison(c, r);
  EXPECT_LE(r.logits, 1e-5);
  ASSERT_EQ(r.lossErrors.size(), 3u);
  for (size_t s = 0; s < 3; ++s) EXPECT_LE(r.lossErrors[s], 1e-5) << "loss at step " << s + 1;
  EXPECT_GT(r.eagerLosses[0], r.eagerLosses[2]) << "the steps did not train";
  ASSERT_EQ(r.params.size(), models::parameterSpecs(c.cfg).size());
  for (const ParamError& e : r.params) {
    EXPECT_LE(e.weights, 1e-5) << e.name;
    EXPECT_LE(e.update, 1e-4) << e.name;  // the interpreter's double accumulators: close to eager
  }
}

// A train_step whose AdamW has another learning rate than eager's: the comparison must see it.
TEST(PlannedVsEager, DetectsAWrongTrainStep) {
  const ComparisonCase c = tinyCase();
  struct WrongLr final : ProgramRunner {
    std::unique_ptr<Module> m;
    std::unique_ptr<ProgramRunner> r;
    void bind(Bindings&& v) override { r->bind(std::move(v)); }
    void run() override { r->run(); }
    HostTensor output(size_t i) override { return r->output(i); }
    HostTensor read(const std::string& n) override { return r->read(n); }
  };
  RunnerFactory wrong = [&](const Graph& g) -> std::unique_ptr<ProgramRunner> {
    if (g.name != "train_step") return interpreterRunner(g);
    auto w = std::make_unique<WrongLr>();
    models::AdamWConfig other = c.adamw;
    other.lr *= 1.5;
    w->m = planProgram(c.cfg, "train_step", c.dtype, c.batch, c.seq, other);
    w->r = interpreterRunner(*w->m->funcs.at(0));
    return w;
  };
  ComparisonResult r = compareWithEager(c, wrong);
  double worst = 0;
  for (const ParamError& e : r.params) worst = std::max(worst, e.weights);
  std::printf("lr 1.5x: logits %.3g, step-1 loss %.3g, step-3 loss %.3g, worst weights %.3g\n", r.logits,
              r.lossErrors[0], r.lossErrors[2], worst);
  EXPECT_LE(r.lossErrors[0], 1e-5);  // the first loss is computed before any update
  EXPECT_GT(r.lossErrors[2], 1e-4);
  EXPECT_GT(worst, 1e-3);
}

// A backend failure names the stage it happened in (on the GPU: which program, build or step).
TEST(PlannedVsEager, ErrorsNameTheirStage) {
  RunnerFactory failing = [](const Graph& g) -> std::unique_ptr<ProgramRunner> {
    if (g.name == "train_step") throw Error("out of GPU memory: needs 9.00 GiB, 1.00 GiB free");
    return interpreterRunner(g);
  };
  std::string err;
  try {
    compareWithEager(tinyCase(), failing);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_EQ(err, "compiled train_step build: out of GPU memory: needs 9.00 GiB, 1.00 GiB free");
}

TEST(PlannedVsEager, TinyLossCurveFp32) {
  ComparisonCase c = tinyCase();
  c.steps = 20;
  LossCurves curves = lossCurves(c, interpreter(), /*batchCount=*/1);
  ASSERT_EQ(curves.compiled.size(), 20u);
  std::printf("tiny 20 steps: loss %.5f -> %.5f, max |compiled - eager| %.3g\n", curves.eager.front(),
              curves.eager.back(), curves.maxAbsDiff());
  printTimes("tiny fp32 curve", curves.seconds);
  EXPECT_LT(curves.eager.back(), curves.eager.front() - 0.1) << "one batch repeated must be learnt";
  EXPECT_LE(curves.maxAbsDiff(), 1e-4);
}

TEST(PlannedVsEager, Bf16EagerNeedsCuda) {
  const models::ModelConfig cfg = models::namedConfig("tiny");
  bench::EagerOptions opts;
  opts.dtype = DType::bf16;
  std::string err;
  try {
    bench::EagerModel eager(cfg, initWeights(cfg, 1), opts);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_EQ(err, "eager model: bf16 eager needs CUDA (it runs under CUDA autocast), got device 'cpu'");
  opts.dtype = DType::f16;
  try {
    bench::EagerModel eager(cfg, initWeights(cfg, 1), opts);
    err = "<no error>";
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_EQ(err, "eager model: dtype f16 is not supported (f32 or bf16)");
}

// initWeights draws on threads; the values must be initParameters' own.
TEST(PlannedVsEager, ParallelInitIsInitParameters) {
  const models::ModelConfig cfg = models::namedConfig("tiny");
  Bindings a = initWeights(cfg, 7), b = initParameters(cfg, 7);
  ASSERT_EQ(a.size(), b.size());
  for (auto& [name, t] : b) EXPECT_EQ(a.at(name).f, t.f) << name;
}

}  // namespace
