// The runtime's Executable: whole programs (tiny and a 2-layer small; forward and 3 training
// steps; fp32 and bf16) on the GPU against the CPU interpreter running the unoptimised
// program, with and without the CUDA graph; and its errors (unbound inputs, wrong types,
// out of memory). Skips without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>

#include "frontend/init.h"
#include "frontend/models/attention.h"
#include "frontend/models/transformer.h"
#include "frontend/program_state.h"
#include "ir/parser.h"
#include "passes/pass_manager.h"
#include "api/compile.h"
#include "passes/pipeline.h"
#include "runtime/device.h"
#include "runtime/executable.h"
#include "runtime/host_storage.h"
#include "runtime/kernel_activity.h"
#include "test_util.h"

namespace fusec {
namespace {

struct Case {
  std::string model;
  int64_t layers;
  std::string program;
  DType dtype;
  int64_t batch, ctx;
};

std::string label(const Case& c) {
  return c.model + "/" + std::to_string(c.layers) + "L/" + c.program + "/" + std::string(dtypeName(c.dtype));
}
// ctest shows a parameter as gtest prints it: the label, not a dump of the struct's bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << label(c); }

// The traced program after its program passes (what the interpreter runs).
void buildProgram(Module& m, const Case& c) {
  models::ModelConfig cfg = models::namedConfig(c.model);
  cfg.layers = c.layers;
  if (c.program == "forward") models::buildForward(m, cfg, c.batch, c.ctx);
  else models::buildTrainLoss(m, cfg, c.batch, c.ctx);
  api::lowerProgram(m, c.program, {.dtype = c.dtype, .passes = ""});
}

void optimise(Module& m) { api::lowerProgram(m, "", {.programPasses = false}); }

// Weights, ids, targets and the program's own state for `g`.
Bindings bindings(const Case& c, const Graph& g) {
  models::ModelConfig cfg = models::namedConfig(c.model);
  cfg.layers = c.layers;
  Bindings env = initParameters(cfg, 11);
  std::mt19937 rng(5);
  env["ids"] = test::randomIndex(Type{DType::i64, {c.batch, c.ctx}}, rng, 0, cfg.vocab);
  env["targets"] = test::randomIndex(Type{DType::i64, {c.batch, c.ctx}}, rng, 0, cfg.vocab);
  bindProgramState(g, env);
  return env;
}

HostTensor stepTensor(int64_t step) {
  HostTensor t = HostTensor::zeros(Type{DType::f32, {}});
  t.f[0] = float(step);
  return t;
}

class ExecutableTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    std::string why;
    if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  }
};

// Interpreter (unoptimised program) vs the Executable (optimised, planned), graph on and off:
// forward logits, or 3 steps' losses and every param after them. The graph and the direct
// launches run the same kernels in the same order: they must agree bit for bit.
TEST_P(ExecutableTest, MatchesInterpreter) {
  const Case& c = GetParam();
  const bool train = c.program == "train_step";
  const int steps = train ? 3 : 1;
  Module ref;
  buildProgram(ref, c);
  const Graph& rg = *ref.funcs.at(0);
  Bindings env = bindings(c, rg);

  // The reference: the interpreter, state carried through the updates.
  std::vector<float> refLoss;
  HostTensor refLogits;
  Bindings refEnv = env;
  for (int s = 1; s <= steps; ++s) {
    if (train) refEnv["step"] = stepTensor(s);
    std::vector<HostTensor> outs = interpret(rg, refEnv);
    if (!train) refLogits = outs.at(0);
    else refLoss.push_back(outs.at(0).f.at(0));
    for (size_t i = 0; i < outs.size(); ++i)
      if (!rg.updateOf(i).empty()) refEnv[rg.updateOf(i)] = std::move(outs[i]);
  }

  Module m;
  buildProgram(m, c);
  optimise(m);
  const Graph& g = *m.funcs.at(0);
  const double bound = c.dtype == DType::f32 ? 1e-5 : 2e-2;
  // Modes: the CUDA graph, direct launches, the graph with generated kernels that do not
  // wait for their predecessor and are launched as before (FUSEC_DEPENDENT_LAUNCH=0,
  // codegen::Target::dependentLaunch), and the graph with AdamW's kernels on a side stream
  // beside the backward (FUSEC_SIDE_STREAM=1, ir/side_stream.h): all four give the same bits.
  enum Mode { Graph, Direct, GraphIndependent, SideStream };
  std::map<int, Bindings> finals;
  for (Mode modeId : {Graph, Direct, GraphIndependent, SideStream}) {
    const bool graph = modeId != Direct;
    std::optional<test::ScopedEnv> independent, sideStream;
    if (modeId == GraphIndependent) independent.emplace("FUSEC_DEPENDENT_LAUNCH", "0");
    if (modeId == SideStream) sideStream.emplace("FUSEC_SIDE_STREAM", "1");
    rt::ExecutableOptions o;
    o.cudaGraph = graph;
    rt::Executable exe(g, o);
    EXPECT_GT(exe.bind(env), 0u);
    std::vector<float> loss;
    HostTensor logits;
    for (int s = 1; s <= steps; ++s) {
      if (train) exe.bind("step", stepTensor(s));
      exe.run();
      if (train) loss.push_back(exe.output(0).f.at(0));
      else logits = exe.output(0);
    }
    EXPECT_EQ(exe.graphCaptured(), graph && steps > 1);
    const char* mode = modeId == Graph              ? "graph"
                       : modeId == Direct           ? "direct"
                       : modeId == GraphIndependent ? "graph, independent launches"
                                                    : "graph, side stream";
    if (!train) {
      double e = test::normRelError(logits, refLogits);
      std::printf("%s %s logits: %.3g\n", label(c).c_str(), mode, e);
      EXPECT_LE(e, bound);
      finals[modeId]["logits"] = logits;
      continue;
    }
    for (int s = 0; s < steps; ++s) {
      double e = std::abs(loss[size_t(s)] - refLoss[size_t(s)]) / std::abs(refLoss[size_t(s)]);
      std::printf("%s %s loss[%d] %.7g vs %.7g: %.3g\n", label(c).c_str(), mode, s + 1, loss[size_t(s)], refLoss[size_t(s)], e);
      EXPECT_LE(e, bound);
    }
    double worst = 0;
    std::string worstName;
    for (Op* p : g.params()) {
      const std::string& name = p->attrStr("name");
      HostTensor got = exe.read(name);
      double e = test::normRelError(got, refEnv.at(name));
      if (e > worst) worst = e, worstName = name;
      finals[modeId][name] = std::move(got);
    }
    std::printf("%s %s params after %d steps: worst %.3g (%s)\n", label(c).c_str(), mode, steps, worst, worstName.c_str());
    EXPECT_LE(worst, bound) << worstName;
  }
  for (auto& [name, t] : finals[Graph]) {
    EXPECT_EQ(t.f, finals[Direct].at(name).f) << name << ": graph vs direct differ";
    EXPECT_EQ(t.f, finals[GraphIndependent].at(name).f) << name << ": dependent vs independent launches differ";
    EXPECT_EQ(t.f, finals[SideStream].at(name).f) << name << ": the side stream changed a value";
  }
}

INSTANTIATE_TEST_SUITE_P(Programs, ExecutableTest,
                         ::testing::Values(Case{"tiny", 2, "forward", DType::f32, 2, 13},
                                           Case{"tiny", 2, "train_step", DType::f32, 2, 13},
                                           Case{"tiny", 2, "forward", DType::bf16, 2, 13},
                                           Case{"tiny", 2, "train_step", DType::bf16, 2, 13},
                                           Case{"small", 2, "forward", DType::f32, 2, 32},
                                           Case{"small", 2, "train_step", DType::f32, 2, 32},
                                           Case{"small", 2, "train_step", DType::bf16, 2, 32}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return c.model + "_" + c.program + "_" + std::string(dtypeName(c.dtype));
                         });

// Softmax over rows of 16,000 (kept in registers: at most 32 elements per thread of 512) and
// 40,000 (too long for that), f32 and bf16: the row_reduce kernel re-reads the row in
// every pass and stores its output element by element (it once emitted the register mode's
// vector stores there, which NVRTC rejected: naive attention at N 32768).
class WideRows : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  }
};

TEST_F(WideRows, SoftmaxMatchesInterpreter) {
  for (const char* dt : {"f32", "bf16"})
    for (int64_t r : {16000, 40000}) {
      const std::string t = std::string(dt) + "[3," + std::to_string(r) + "]", t1 = std::string(dt) + "[3,1]";
      auto m = parseModule("func @softmax {\n  %x = input() {name = \"x\"} : " + t +
                           "\n  %mx = reduce_max(%x) {axes = [1], keepdim = true} : " + t1 +
                           "\n  %mxb = broadcast(%mx) : " + t + "\n  %d = sub(%x, %mxb) : " + t + "\n  %e = exp(%d) : " + t +
                           "\n  %z = sum(%e) {axes = [1], keepdim = true} : " + t1 + "\n  %zb = broadcast(%z) : " + t +
                           "\n  %p = div(%e, %zb) : " + t + "\n  return %p\n}\n");
      std::mt19937 rng{uint32_t(r)};
      Bindings env;
      env["x"] = test::randomNonZero(m->funcs.at(0)->inputs().at(0)->result()->type, rng, 4.0);
      const HostTensor want = interpret(*m->funcs.at(0), env).at(0);
      optimise(*m);
      rt::Executable exe(*m->funcs.at(0));
      exe.bind(env);
      exe.run();
      const double e = test::normRelError(exe.output(0), want);
      std::printf("softmax %s: %.3g\n", t.c_str(), e);
      EXPECT_LE(e, std::string(dt) == "f32" ? 1e-6 : 1e-2) << t;
    }
}

class ExecutableErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  }
};

TEST_F(ExecutableErrors, UnboundAndMistypedSources) {
  Case c{"tiny", 1, "train_step", DType::f32, 1, 4};
  Module m;
  buildProgram(m, c);
  optimise(m);
  rt::Executable exe(*m.funcs.at(0));
  test::expectError([&] { exe.run(); }, "was never bound");
  test::expectError([&] { exe.bind("ids", HostTensor::zeros(Type{DType::i64, {1, 5}})); }, "'ids' is i64[1,5], expected i64[1,4]");
  test::expectError([&] { exe.bind("nope", HostTensor::zeros(Type{DType::f32, {}})); }, "no input or parameter 'nope'");
}

TEST_F(ExecutableErrors, OutOfMemoryIsOneLine) {
  Module m;
  models::buildAttention(m, 64, 1 << 17, 64);  // scores alone: 64 * 2^34 * 4 bytes = 4 TiB
  api::lowerProgram(m, "attention", {.dtype = DType::f32});
  test::expectError([&] { rt::Executable exe(*m.funcs.at(0)); }, "out of GPU memory: needs ");
}

// The optimised training step of `c`, built into `m`, as an executable with its weights,
// inputs, state and step 1 bound.
std::unique_ptr<rt::Executable> boundTrainStep(Module& m, const Case& c) {
  buildProgram(m, c);
  optimise(m);
  const Graph& g = *m.funcs.at(0);
  auto exe = std::make_unique<rt::Executable>(g);
  exe->bind(bindings(c, g));
  exe->bind("step", stepTensor(1));
  return exe;
}

// Every launch of small's bf16 and fp32 training steps (batch 4, ctx 256) is timed, and the
// slowest are printed with the total per kind: the quick look before `fusec profile`.
TEST_F(ExecutableErrors, TimesEveryLaunch) {
  for (DType dt : {DType::bf16, DType::f32}) {
    Module m;
    auto exe = boundTrainStep(m, Case{"small", 12, "train_step", dt, 4, 256});
    exe->run();
    std::vector<float> ms = exe->timeLaunches();
    ASSERT_EQ(ms.size(), exe->launches().size());
    std::map<std::string, std::pair<int, double>> byKind;
    double total = 0;
    for (size_t i = 0; i < ms.size(); ++i) {
      const rt::LaunchInfo& l = exe->launches()[i];
      // RoPE's tables are step-invariant: computed at the first call (exe->run() above) only.
      if (l.once) {
        EXPECT_EQ(ms[i], 0.f) << l.name;
        continue;
      }
      EXPECT_GT(ms[i], 0.f) << l.name;
      std::string kind = l.kind == rt::LaunchInfo::Kind::Gemm ? "gemm" : l.name.substr(l.name.rfind('_') + 1);
      byKind[kind].first++;
      byKind[kind].second += ms[i];
      total += ms[i];
    }
    std::vector<size_t> order(ms.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ms[a] > ms[b]; });
    std::printf("small train_step %s: %zu launches, %.3f ms in total\n", std::string(dtypeName(dt)).c_str(), ms.size(), total);
    for (auto& [kind, v] : byKind) std::printf("  kind %-16s %4d launches %8.3f ms\n", kind.c_str(), v.first, v.second);
    for (size_t k = 0; k < 25 && k < order.size(); ++k) {
      const rt::LaunchInfo& l = exe->launches()[order[k]];
      std::printf("  %8.3f ms  %s\n", ms[order[k]], l.name.c_str());
    }
  }
}

// Kernel durations from CUPTI in the step's graph (what `fusec profile` reports by default):
// one per launch, each positive, and together less than the same launches timed one by one
// between CUDA events, whose times also hold each launch's gap. Twice: the kernel counts are
// taken on the first call only.
TEST_F(ExecutableErrors, TimesKernelsInTheGraph) {
  std::optional<rt::KernelActivity> activity;
  try {
    activity.emplace();  // before the graph is built, as fusec profile does
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();
  }
  Module m;
  auto exe = boundTrainStep(m, Case{"tiny", 2, "train_step", DType::bf16, 2, 16});
  test::expectError([&] { exe->timeKernels(*activity); }, "needs the step's CUDA graph");
  exe->run();
  exe->run();
  ASSERT_TRUE(exe->graphCaptured());
  for (int round = 0; round < 2; ++round) {
    const std::vector<float> kernels = exe->timeKernels(*activity);
    const std::vector<float> events = exe->timeLaunches();
    ASSERT_EQ(kernels.size(), exe->launches().size());
    double k = 0, e = 0;
    for (size_t i = 0; i < kernels.size(); ++i) {
      if (exe->launches()[i].once) EXPECT_EQ(kernels[i], 0.f) << exe->launches()[i].name;
      else EXPECT_GT(kernels[i], 0.f) << exe->launches()[i].name;
      k += kernels[i], e += events[i];
    }
    EXPECT_LT(k, e) << "round " << round;
  }
}

}  // namespace
}  // namespace fusec
