// Tests of matmul's out_perm and of the gemm-layout and merge-gemms passes (and the
// canonicalize/cse/dce rules they rely on): the interpreter agrees before and after on
// random non-zero inputs, for the hand-written .fir cases and the tiny transformer's
// train_step; every GEMM operand ends up readable in place; the GEMM counts per layer.
#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <random>
#include <unordered_set>

#include "frontend/models/transformer.h"
#include "ir/host_tensor.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/autodiff.h"
#include "passes/decompose.h"
#include "passes/gemm_layout.h"
#include "passes/pass.h"
#include "passes/pass_manager.h"
#include "api/compile.h"
#include "passes/pipeline.h"
#include "support/ptr_hash.h"
#include "test_util.h"

namespace fusec {
namespace {

using test::f32;

// Random non-zero floats of magnitude [0.1, 0.5]; integer inputs in [0, intRange).
Bindings randomEnv(const Graph& g, uint32_t seed, int64_t intRange = 4) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> mag(0.1, 0.5);
  Bindings env;
  for (auto& op : g.ops) {
    if (op->kind != OpKind::Input && op->kind != OpKind::Param) continue;
    HostTensor h = HostTensor::zeros(op->result()->type);
    for (size_t k = 0; k < h.size(); ++k) {
      if (isFloat(h.type.dtype)) h.set(k, (rng() % 2 ? 1 : -1) * mag(rng));
      else if (h.type.dtype == DType::boolean) h.set(k, double(rng() % 2));
      else h.set(k, double(int64_t(rng() % uint64_t(intRange))));
    }
    env[op->attrStr("name")] = std::move(h);
  }
  if (env.count("step")) env["step"].set(0, 1);
  return env;
}

// Largest relative difference (with a floor on the scale so exact zeros compare absolutely).
double maxRelDiff(const std::vector<HostTensor>& a, const std::vector<HostTensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t k = 0; k < a[i].size(); ++k) {
      double x = a[i].get(k), y = b[i].get(k);
      if (x == y) continue;
      worst = std::max(worst, std::fabs(x - y) / std::max({std::fabs(x), std::fabs(y), 1e-3}));
    }
  return worst;
}

void runPasses(Module& m, const std::vector<std::string>& names) {
  for (auto& n : names) {
    createPass(n)->run(m);
    ASSERT_NO_THROW(verify(m)) << "after " << n << "\n" << printModule(m);
  }
}

// Every function of `m` means the same before and after `passes`; returns the worst
// relative difference.
double checkSemantics(Module& m, const std::vector<std::string>& passes, int64_t intRange = 4) {
  auto before = cloneModule(m);
  runPasses(m, passes);
  double worst = 0;
  for (size_t f = 0; f < m.funcs.size(); ++f) {
    Bindings env = randomEnv(*before->funcs[f], 77 + uint32_t(f), intRange);
    auto want = interpret(*before->funcs[f], env);
    auto got = interpret(*m.funcs[f], env);
    EXPECT_EQ(want.size(), got.size());
    if (want.size() == got.size()) worst = std::max(worst, maxRelDiff(want, got));
  }
  return worst;
}

int countKind(const Graph& g, OpKind k) {
  int n = 0;
  for (auto& op : g.ops) n += op->kind == k;
  return n;
}

// ---- out_perm --------------------------------------------------------------------------

TEST(MatmulOutPerm, EqualsPermuteOfResult) {
  test::GraphUnderTest t;
  std::mt19937 rng(3);
  Value* a = t.in("a", HostTensor::zeros(f32({2, 3, 4, 5})));
  Value* b = t.in("b", HostTensor::zeros(f32({2, 3, 6, 5})));
  Value* plain = t.b.matmul(a, b, false, true);
  t.b.output(t.b.permute(plain, {2, 0, 1, 3}));
  t.b.output(t.b.create1(OpKind::Matmul, {a, b}, {{"transpose_b", true}, {"out_perm", std::vector<int64_t>{2, 0, 1, 3}}}));
  verify(t.m);
  EXPECT_EQ(t.g.outputs[1]->type, f32({4, 2, 3, 6}));
  auto out = interpret(t.g, randomEnv(t.g, 5));
  EXPECT_EQ(maxRelDiff({out[0]}, {out[1]}), 0.0);
}

TEST(MatmulOutPerm, TypeRuleNeedsNLast) {
  test::GraphUnderTest t;
  Value* a = t.in("a", HostTensor::zeros(f32({2, 4, 5})));
  Value* b = t.in("b", HostTensor::zeros(f32({2, 5, 6})));
  auto mm = [&](std::vector<int64_t> p) {
    return test::errorOf([&] { t.b.create1(OpKind::Matmul, {a, b}, {{"out_perm", p}}); });
  };
  EXPECT_EQ(mm({1, 0, 2}), "<no error>");
  EXPECT_EQ(mm({0, 2, 1}), "matmul out_perm must be a permutation of 0..2 ending in 2, got [0,2,1]");
  EXPECT_EQ(mm({0, 1}), "matmul out_perm must be a permutation of 0..2 ending in 2, got [0,1]");
  EXPECT_EQ(mm({1, 1, 2}), "matmul out_perm must be a permutation of 0..2 ending in 2, got [1,1,2]");
}

// The VJP of matmul{out_perm} is the VJP of permute(matmul).
TEST(MatmulOutPerm, Autodiff) {
  auto build = [](Module& m, bool fused) {
    Graph& g = m.add("f");
    Builder b(g);
    Value* x = b.input("x", f32({2, 3, 4, 5}));
    Value* w = b.param("w", f32({5, 6}));
    Value* y = fused ? b.create1(OpKind::Matmul, {x, w}, {{"out_perm", std::vector<int64_t>{0, 2, 1, 3}}})
                     : b.permute(b.matmul(x, w), {0, 2, 1, 3});
    Value* loss = b.reduce(OpKind::Sum, b.binary(OpKind::Mul, y, b.unary(OpKind::Sin, y)), {0, 1, 2, 3});
    b.output(loss);
    for (Value* d : appendGradients(g, loss, {x, w})) b.output(d);
  };
  Module m1, m2;
  build(m1, false);
  build(m2, true);
  verify(m2);
  Bindings env = randomEnv(*m1.funcs[0], 9);
  EXPECT_LT(maxRelDiff(interpret(*m1.funcs[0], env), interpret(*m2.funcs[0], env)), 1e-6);
}

// ---- the .fir cases, interpreted ----------------------------------------------------------

struct FirCase {
  const char* file;
  std::vector<std::string> passes;
  // K-merges sum the partial products in one double accumulator instead of rounding each
  // GEMM to f32 before the add: a few f32 ulps, never bit-exact by construction.
  double rel = 1e-6;
};

// ctest shows a parameter as gtest prints it: the file, not a dump of the struct's bytes.
void PrintTo(const FirCase& c, std::ostream* os) { *os << c.file; }

class FirSemantics : public ::testing::TestWithParam<FirCase> {};

TEST_P(FirSemantics, SameResults) {
  auto m = parseFile(std::string(FUSEC_SOURCE_DIR) + "/tests/lit/passes/" + GetParam().file);
  EXPECT_LE(checkSemantics(*m, GetParam().passes), GetParam().rel);
}

INSTANTIATE_TEST_SUITE_P(Passes, FirSemantics,
                         ::testing::Values(FirCase{"gemm-layout.fir", {"gemm-layout"}},
                                           FirCase{"merge-gemms.fir", {"merge-gemms", "cse", "dce"}, 1e-5},
                                           FirCase{"canonicalize-concat-slice.fir", {"canonicalize"}},
                                           FirCase{"dce.fir", {"dce"}}),
                         [](const ::testing::TestParamInfo<FirCase>& info) {
                           std::string n;
                           for (const char* c = info.param.file; *c && *c != '.'; ++c) n += std::isalnum(*c) ? *c : '_';
                           return n;
                         });

// widen-gemm-outputs: a returned bf16 GEMM result cast to f32 comes from the GEMM in f32, the
// accumulator not rounded to bf16 on the way. So the widened value, rounded to bf16, is the
// old value bit for bit, and it differs from it by at most half a bf16 ulp; every other output
// is unchanged.
TEST(WidenGemmOutputs, TheOldValueIsTheNewRoundedToBf16) {
  auto m = parseFile(std::string(FUSEC_SOURCE_DIR) + "/tests/lit/passes/widen-gemm-outputs.fir");
  auto before = cloneModule(*m);
  runPasses(*m, {"widen-gemm-outputs"});
  ASSERT_EQ(countKind(*m->funcs[0], OpKind::Cast), countKind(*before->funcs[0], OpKind::Cast) - 1);
  Bindings env = randomEnv(*before->funcs[0], 11);
  auto want = interpret(*before->funcs[0], env), got = interpret(*m->funcs[0], env);
  ASSERT_EQ(want.size(), got.size());
  int rounded = 0;
  for (size_t k = 0; k < want[0].size(); ++k) {
    const float w = float(want[0].get(k)), g = float(got[0].get(k));
    EXPECT_EQ(roundToBF16(g), w) << k;
    EXPECT_LE(std::fabs(g - w), std::ldexp(std::fabs(w), -8)) << k;
    rounded += g != w;
  }
  EXPECT_GT(rounded, 0);  // the widened values are not bf16 values: the rounding is gone
  for (size_t i = 1; i < want.size(); ++i) EXPECT_EQ(maxRelDiff({want[i]}, {got[i]}), 0.0) << i;
}

// ---- the tiny and small transformer train_step ----------------------------------------------

const std::vector<std::string> kChain = {"canonicalize", "cse", "dce", "gemm-layout", "merge-gemms",
                                         "canonicalize", "cse", "dce"};

std::unique_ptr<Module> trainStep(const std::string& model, int64_t batch, int64_t seq) {
  // As the (naive) pipeline builds it: decompose-attention on the loss before autodiff (the
  // builder's buildTrainStep would differentiate the composite: attention_backward), then
  // autodiff, AdamW and decompose.
  auto m = std::make_unique<Module>();
  models::buildTrainLoss(*m, models::namedConfig(model), batch, seq);
  api::lowerProgram(*m, "train_step", {.dtype = DType::f32, .passes = ""});
  decomposeGraph(*m->funcs[0]);
  EXPECT_EQ(countKind(*m->funcs[0], OpKind::Attention), 0);
  return m;
}

TEST(GemmPasses, TinyTrainStepSemantics) {
  auto m = trainStep("tiny", 2, 8);
  double worst = checkSemantics(*m, kChain, 37);
  EXPECT_LE(worst, 1e-5);  // K-merge rounding, as above
  std::printf("[ info ] tiny train_step: max relative difference %.3g\n", worst);
}

// Forward (ancestors of the loss) and backward GEMMs per layer, after the chain.
TEST(GemmPasses, TinyTrainStepGemmCounts) {
  auto m = trainStep("tiny", 2, 8);
  runPasses(*m, kChain);
  Graph& g = *m->funcs[0];
  PtrSet<const Op*> forward;
  std::vector<const Value*> stack{g.outputs.at(0)};
  while (!stack.empty()) {
    const Op* d = stack.back()->def;
    stack.pop_back();
    if (!d || !forward.insert(d).second) continue;
    for (const Value* v : d->operands) stack.push_back(v);
  }
  int fwd = 0, bwd = 0;
  for (auto& op : g.ops)
    if (op->kind == OpKind::Matmul) (forward.count(op.get()) ? fwd : bwd)++;
  const int layers = 2;
  EXPECT_EQ(fwd, layers * 6 + 1) << "forward: per layer QKV, QK^T, PV, out-proj, W1|W3, W2; lm_head";
  EXPECT_EQ(bwd, layers * 12 + 2) << "backward: per layer dX and dW of QKV, out-proj, W1|W3, W2, two each for "
                                     "QK^T and PV; lm_head dX and dW";
}

TEST(GemmPasses, EveryGemmOperandReadable) {
  for (auto [model, seq] : {std::pair<const char*, int64_t>{"tiny", 8}, {"small", 16}}) {
    SCOPED_TRACE(model);
    auto m = trainStep(model, 2, seq);
    runPasses(*m, kChain);
    auto bad = unreadableGemmOperands(*m->funcs[0]);
    std::string list;
    for (const Op* op : bad)
      list += "matmul(" + op->operands[0]->type.str() + ", " + op->operands[1]->type.str() + ") -> " +
              op->result()->type.str() + "\n";
    EXPECT_TRUE(bad.empty()) << list;
  }
}

}  // namespace
}  // namespace fusec
