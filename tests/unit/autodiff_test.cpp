// Tests of reverse-mode autodiff (passes/autodiff.cpp). Each gradient test builds a small
// graph with odd shapes, takes loss = sum(f(x) * r) with a fixed random weight r, appends
// the gradients, checks that the module verifies, and compares the interpreted gradients
// with central finite differences of the interpreted loss (norm-wise relative error).
// Inputs stay away from kinks and ties (|x| >= 0.5, max/min operands >= 0.2 apart, distinct
// reduce_max values), so the differences are meaningful.
//
// Every test registers the op kinds it exercises; the last test fails if an op in
// ir/ops.def is covered by none (a new op needs a VJP test or a no-gradient test).
#include <gtest/gtest.h>

#include <cstdint>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ir/builder.h"
#include "passes/vjp_rules.h"
#include "ir/interpreter.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/autodiff.h"
#include "test_util.h"

using namespace fusec;

namespace {

// ---------------------------------------------------------------------------------------
// Coverage registry


// ---------------------------------------------------------------------------------------
// Tensors

const DType F = DType::f32;

// Magnitudes in [0.5, 2] with random signs (or positive).
// Distinct values 0.1 apart, shuffled: no ties and no crossing under a 1e-2 step.
HostTensor distinctF(const Type& t, std::mt19937& rng) {
  HostTensor h = HostTensor::zeros(t);
  std::vector<size_t> perm(h.size());
  std::iota(perm.begin(), perm.end(), size_t(0));
  std::shuffle(perm.begin(), perm.end(), rng);
  for (size_t k = 0; k < h.size(); ++k) h.set(k, 0.1 * double(perm[k]) - 0.05 * double(h.size()));
  return h;
}

HostTensor fromValues(const Type& t, const std::vector<double>& v) {
  HostTensor h = HostTensor::zeros(t);
  for (size_t k = 0; k < v.size(); ++k) h.set(k, v[k]);
  return h;
}

// ---------------------------------------------------------------------------------------
// Graphs and the gradient check

struct Fn : test::GraphUnderTest {
  // loss = sum(out * r) over every axis, r a fixed random input.
  Value* weightedLoss(Value* out, std::mt19937& rng) {
    Value* r = in("__r", test::randomNonZero(out->type, rng));
    Value* p = b.binary(OpKind::Mul, out, r);
    if (p->type.rank() == 0) return p;
    std::vector<int64_t> axes(size_t(p->type.rank()));
    std::iota(axes.begin(), axes.end(), int64_t(0));
    return b.reduce(OpKind::Sum, p, axes);
  }
};

const std::string& bindingName(const Value* v) { return v->def->attrStr("name"); }

double lossAt(const Graph& fwd, const Bindings& env) { return interpret(fwd, env).at(0).get(0); }

// Norm-wise: ||analytic - fd|| <= rtol * max(||fd||, ||analytic||) (+ a tiny floor for zeros).
::testing::AssertionResult closeNorm(const HostTensor& got, const std::vector<double>& fd, double rtol) {
  double diff = 0, nfd = 0, ngot = 0, worst = -1;
  size_t at = 0;
  for (size_t k = 0; k < fd.size(); ++k) {
    double e = got.get(k) - fd[k];
    diff += e * e;
    nfd += fd[k] * fd[k];
    ngot += got.get(k) * got.get(k);
    if (std::fabs(e) > worst) worst = std::fabs(e), at = k;
  }
  diff = std::sqrt(diff), nfd = std::sqrt(nfd), ngot = std::sqrt(ngot);
  if (std::isfinite(diff) && diff <= rtol * std::max(nfd, ngot) + 1e-6) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "||analytic - fd|| = " << diff << ", ||fd|| = " << nfd
                                       << ", ||analytic|| = " << ngot << "; worst element " << at << ": analytic "
                                       << got.get(at) << " vs fd " << fd[at];
}

// Appends the gradients of scalar `loss` w.r.t. `wrt` (inputs or params), checks types,
// verification and the text round-trip, and compares each gradient with central differences of the loss.
void checkLossGrad(Fn& f, Value* loss, const std::vector<Value*>& wrt, double eps = 1e-2, double rtol = 1e-2) {
  f.g.outputs = {loss};
  auto fwd = cloneGraph(f.g);
  std::vector<Value*> grads = appendGradients(f.g, loss, wrt);
  ASSERT_EQ(grads.size(), wrt.size());
  for (size_t i = 0; i < wrt.size(); ++i) ASSERT_EQ(grads[i]->type, wrt[i]->type) << "gradient " << i;
  for (Value* gv : grads) f.g.outputs.push_back(gv);
  ASSERT_NO_THROW(verify(f.m)) << printModule(f.m);
  const std::string text = printModule(f.m);
  EXPECT_EQ(printModule(*parseModule(text)), text);  // e.g. attention's -inf mask constant
  std::vector<HostTensor> got = interpret(f.g, f.env);
  const double L0 = got[0].get(0);
  ASSERT_TRUE(std::isfinite(L0));
  for (size_t i = 0; i < wrt.size(); ++i) {
    const std::string& name = bindingName(wrt[i]);
    const HostTensor& x0 = f.env.at(name);
    std::vector<double> fd(x0.size());
    for (size_t k = 0; k < x0.size(); ++k) {
      Bindings env = f.env;
      HostTensor& x = env.at(name);
      x.set(k, x0.get(k) + eps);
      double xp = x.get(k);  // the stored (rounded) values, for low-precision dtypes
      double lp = lossAt(*fwd, env);
      x.set(k, x0.get(k) - eps);
      double xm = x.get(k);
      double lm = lossAt(*fwd, env);
      fd[k] = (lp - lm) / (xp - xm);
    }
    EXPECT_TRUE(closeNorm(got[i + 1], fd, rtol)) << "d loss / d " << name << "\n" << printModule(f.m);
  }
}

void checkGrad(Fn& f, Value* out, const std::vector<Value*>& wrt, std::mt19937& rng, double eps = 1e-2,
               double rtol = 1e-2) {
  checkLossGrad(f, f.weightedLoss(out, rng), wrt, eps, rtol);
}

size_t countKind(const Graph& g, OpKind k) {
  return size_t(std::count_if(g.ops.begin(), g.ops.end(), [&](const auto& op) { return op->kind == k; }));
}

// ---------------------------------------------------------------------------------------
// Pointwise

struct UnaryCase {
  OpKind kind;
  bool positive;  // domain x > 0
};

const std::vector<UnaryCase> kUnaryCases = {
      {OpKind::Neg, false},  {OpKind::Abs, false},  {OpKind::Relu, false},  {OpKind::Exp, false},
      {OpKind::Log, true},   {OpKind::Sqrt, true},  {OpKind::Rsqrt, true},  {OpKind::Recip, false},
      {OpKind::Tanh, false}, {OpKind::Sin, false},  {OpKind::Cos, false},   {OpKind::Sigmoid, false},
      {OpKind::Erf, false},
  };
[[maybe_unused]] const bool kUnaryCovered = [] {
  for (const UnaryCase& c : kUnaryCases) cover({c.kind});
  return true;
}();

TEST(AutodiffPointwise, Unary) {
  for (const UnaryCase& c : kUnaryCases) {
    SCOPED_TRACE(std::string(opInfo(c.kind).name));
    std::mt19937 rng(uint32_t(c.kind) + 1);
    Fn f;
    Value* x = f.in("x", test::randomNonZero(Type{F, {3, 5}}, rng, 1, c.positive));
    checkGrad(f, f.b.unary(c.kind, x), {x}, rng);
  }
}

const std::vector<OpKind> kBinaryKinds = {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div,
                                          OpKind::Max, OpKind::Min, OpKind::Pow};
COVERS(OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div, OpKind::Max, OpKind::Min, OpKind::Pow);

TEST(AutodiffPointwise, Binary) {
  for (OpKind k : kBinaryKinds) {
    SCOPED_TRACE(std::string(opInfo(k).name));
    std::mt19937 rng(uint32_t(k) + 100);
    Fn f;
    Type t{F, {4, 3}};
    HostTensor a = test::randomNonZero(t, rng, 1, k == OpKind::Pow), bv = test::randomNonZero(t, rng);
    if (k == OpKind::Max || k == OpKind::Min) {  // b = a +- [0.2, 1]: no ties, no crossing
      std::uniform_real_distribution<double> off(0.2, 1.0);
      std::bernoulli_distribution neg(0.5);
      for (size_t e = 0; e < a.size(); ++e) bv.set(e, a.get(e) + (neg(rng) ? -off(rng) : off(rng)));
    }
    Value* xa = f.in("a", a);
    Value* xb = f.in("b", bv);
    checkGrad(f, f.b.binary(k, xa, xb), {xa, xb}, rng);
  }
}

COVERS(OpKind::Max, OpKind::Min);
TEST(AutodiffPointwise, MaxMinTiesGoToTheFirstOperand) {
  for (OpKind k : {OpKind::Max, OpKind::Min}) {
    std::mt19937 rng(7);
    Fn f;
    HostTensor v = test::randomNonZero(Type{F, {2, 3}}, rng);
    Value* a = f.in("a", v);
    Value* b = f.in("b", v);
    Value* loss = f.weightedLoss(f.b.binary(k, a, b), rng);
    auto grads = appendGradients(f.g, loss, {a, b});
    f.g.outputs = {grads[0], grads[1]};
    auto got = interpret(f.g, f.env);
    const HostTensor& r = f.env.at("__r");
    for (size_t e = 0; e < v.size(); ++e) {
      EXPECT_EQ(got[0].get(e), r.get(e));
      EXPECT_EQ(got[1].get(e), 0.0);
    }
  }
}

COVERS(OpKind::Select, OpKind::Eq, OpKind::Ne, OpKind::Lt, OpKind::Le, OpKind::Gt, OpKind::Ge, OpKind::Not,
       OpKind::And, OpKind::Or, OpKind::Constant);
TEST(AutodiffPointwise, SelectAndConditionsPassNoGradient) {
  std::mt19937 rng(11);
  Fn f;
  Type t{F, {3, 7}};
  Value* x = f.in("x", test::randomNonZero(t, rng));
  Value* y = f.in("y", test::randomNonZero(t, rng));
  auto k = [&](double v) { return f.b.constant(v, t); };
  Value* c1 = f.b.binary(OpKind::Gt, x, k(0));
  Value* c2 = f.b.binary(OpKind::Le, x, k(100));
  Value* c3 = f.b.binary(OpKind::Ne, x, k(7));
  Value* c4 = f.b.unary(OpKind::Not, f.b.binary(OpKind::Eq, x, k(7)));
  Value* c5 = f.b.binary(OpKind::Lt, x, k(-100));
  Value* c6 = f.b.binary(OpKind::Ge, x, k(-100));
  Value* cond = f.b.binary(OpKind::And, f.b.binary(OpKind::And, c1, c2),
                           f.b.binary(OpKind::And, c3, f.b.binary(OpKind::Or, f.b.binary(OpKind::And, c4, c6), c5)));
  Value* out = f.b.select(cond, f.b.unary(OpKind::Exp, y), f.b.binary(OpKind::Mul, y, x));
  checkGrad(f, out, {x, y}, rng);
}

// out = tanh(x) + stop_gradient(x * x) * y: the gradient w.r.t. x sees only tanh, the one
// w.r.t. y still sees the stopped value (it is a constant, not a zero).
COVERS(OpKind::StopGradient);
TEST(AutodiffPointwise, StopGradientPassesNoGradient) {
  std::mt19937 rng(13);
  Fn f;
  Type t{F, {3, 5}};
  HostTensor xv = test::randomNonZero(t, rng), yv = test::randomNonZero(t, rng), rv = test::randomNonZero(t, rng);
  Value* x = f.in("x", xv);
  Value* y = f.in("y", yv);
  Value* stopped = f.b.unary(OpKind::StopGradient, f.b.binary(OpKind::Mul, x, x));
  Value* out = f.b.binary(OpKind::Add, f.b.unary(OpKind::Tanh, x), f.b.binary(OpKind::Mul, stopped, y));
  Value* loss = f.b.reduce(OpKind::Sum, f.b.binary(OpKind::Mul, out, f.in("r", rv)), {0, 1});
  std::vector<Value*> grads = appendGradients(f.g, loss, {x, y});
  f.g.outputs = grads;
  ASSERT_NO_THROW(verify(f.m));
  std::vector<HostTensor> got = interpret(f.g, f.env);
  for (size_t k = 0; k < xv.size(); ++k) {
    double a = xv.get(k), th = std::tanh(a);
    EXPECT_NEAR(got[0].get(k), (1 - th * th) * rv.get(k), 1e-6) << k;
    EXPECT_NEAR(got[1].get(k), a * a * rv.get(k), 1e-5) << k;
  }
}

COVERS(OpKind::Cast);
TEST(AutodiffPointwise, CastBackToTheOperandDType) {
  std::mt19937 rng(12);
  Fn f;
  Value* x = f.in("x", test::randomNonZero(Type{DType::bf16, {3, 4}}, rng));
  Value* y = f.in("y", test::randomNonZero(Type{F, {3, 4}}, rng));
  Value* xf = f.b.cast(x, F);
  Value* yy = f.b.cast(y, F);  // a same-dtype cast
  Value* out = f.b.binary(OpKind::Mul, f.b.unary(OpKind::Tanh, xf), yy);
  // bf16: a step of 1/16 and bf16-rounded gradients.
  checkGrad(f, out, {x, y}, rng, 1.0 / 16, 4e-2);
}

// ---------------------------------------------------------------------------------------
// Reductions

struct ReduceCase {
  OpKind kind;
  std::vector<int64_t> axes;
  bool keepdim;
};

COVERS(OpKind::Sum, OpKind::Mean, OpKind::RMax, OpKind::RMin);
TEST(AutodiffReduction, SumMeanMaxMin) {
  const std::vector<ReduceCase> cases = {
      {OpKind::Sum, {1}, false},       {OpKind::Sum, {0, 2}, true},    {OpKind::Sum, {0, 1, 2}, false},
      {OpKind::Mean, {-1}, false},     {OpKind::Mean, {0, 1}, true},   {OpKind::RMax, {2}, false},
      {OpKind::RMax, {0, 2}, true},    {OpKind::RMin, {1}, true},      {OpKind::RMin, {0, 1, 2}, false},
  };
  int n = 0;
  for (const ReduceCase& c : cases) {
    SCOPED_TRACE(std::string(opInfo(c.kind).name) + " case " + std::to_string(n));
    std::mt19937 rng(uint32_t(200 + n++));
    Fn f;
    Type t{F, {3, 4, 5}};
    bool isMax = c.kind == OpKind::RMax || c.kind == OpKind::RMin;
    Value* x = f.in("x", isMax ? distinctF(t, rng) : test::randomNonZero(t, rng));
    checkGrad(f, f.b.reduce(c.kind, x, c.axes, c.keepdim), {x}, rng);
  }
}

COVERS(OpKind::RMax, OpKind::RMin);
TEST(AutodiffReduction, MaxTiesSplitEvenly) {
  for (OpKind k : {OpKind::RMax, OpKind::RMin}) {
    double s = k == OpKind::RMax ? 1 : -1;
    Fn f;
    Value* x = f.in("x", fromValues(Type{F, {2, 4}}, {s * 1, s * 3, s * 3, s * 2, s * 5, s * 5, s * 5, 0}));
    Value* r = f.in("r", fromValues(Type{F, {2}}, {0.6, 0.9}));
    Value* loss = f.b.reduce(OpKind::Sum, f.b.binary(OpKind::Mul, f.b.reduce(k, x, {1}), r), {0});
    auto grads = appendGradients(f.g, loss, {x});
    f.g.outputs = {grads[0]};
    HostTensor got = interpret(f.g, f.env).at(0);
    std::vector<double> want = {0, 0.3, 0.3, 0, 0.3, 0.3, 0.3, 0};
    for (size_t e = 0; e < want.size(); ++e) EXPECT_NEAR(got.get(e), want[e], 1e-7) << e;
  }
}

// ---------------------------------------------------------------------------------------
// Layout

COVERS(OpKind::Reshape, OpKind::Permute);
TEST(AutodiffLayout, ReshapePermute) {
  std::mt19937 rng(300);
  Fn f;
  Value* x = f.in("x", test::randomNonZero(Type{F, {2, 3, 4}}, rng));
  Value* p = f.b.permute(f.b.unary(OpKind::Sin, x), {2, 0, 1});           // [4,2,3]
  Value* out = f.b.reshape(f.b.binary(OpKind::Mul, p, p), {8, 3});       // [8,3]
  checkGrad(f, out, {x}, rng);
}

COVERS(OpKind::Broadcast);
TEST(AutodiffLayout, Broadcast) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 1, 5}, {2, 3, 4, 5}}, {{}, {3, 4}}, {{4}, {3, 4}}, {{1, 1}, {3, 2}}, {{2, 3}, {2, 3}}};
  int n = 0;
  for (const auto& [from, to] : cases) {
    SCOPED_TRACE("case " + std::to_string(n));
    std::mt19937 rng(uint32_t(310 + n++));
    Fn f;
    Value* x = f.in("x", test::randomNonZero(Type{F, from}, rng));
    checkGrad(f, f.b.unary(OpKind::Tanh, f.b.broadcast(x, to)), {x}, rng);
  }
}

struct SliceCase {
  int64_t axis, start, end, step;
};

COVERS(OpKind::Slice, OpKind::Concat);
TEST(AutodiffLayout, Slice) {
  const std::vector<SliceCase> cases = {
      {1, 0, 9, 1}, {1, 2, 7, 1}, {1, 0, 9, 2}, {1, 1, 8, 3}, {1, 0, 3, 4}, {1, 2, 9, 4}, {1, 8, 9, 5},
      {0, 1, 5, 2}, {-1, 1, 4, 1}, {-1, 0, 4, 3},
      // One element through a step near INT64_MAX: its type once overflowed to [5, 0, 4].
      {1, 2, 7, INT64_MAX}};
  int n = 0;
  for (const SliceCase& c : cases) {
    SCOPED_TRACE("slice axis " + std::to_string(c.axis) + " [" + std::to_string(c.start) + ", " +
                 std::to_string(c.end) + ") step " + std::to_string(c.step));
    std::mt19937 rng(uint32_t(320 + n++));
    Fn f;
    Value* x = f.in("x", test::randomNonZero(Type{F, {5, 9, 4}}, rng));
    Value* s = f.b.slice(x, c.axis, c.start, c.end, c.step);
    // Plus a term on x itself, so that x's whole gradient is checked, not only the slice's.
    Value* out = f.b.binary(OpKind::Mul, s, s);
    Value* loss = f.b.binary(OpKind::Add, f.weightedLoss(out, rng),
                             f.b.reduce(OpKind::Sum, f.b.unary(OpKind::Sin, x), {0, 1, 2}));
    checkLossGrad(f, loss, {x});
  }
  // Empty slices are refused where they are built (no value may have a zero-size dimension).
  Fn f;
  Value* x = f.b.input("x", Type{F, {5, 9, 4}});
  EXPECT_EQ(test::errorOf([&] { f.b.slice(x, 1, 4, 4, 1); }),
            "slice [4, 4) is empty: fusec does not support tensors with a zero-size dimension");
}

COVERS(OpKind::Concat);
TEST(AutodiffLayout, Concat) {
  std::mt19937 rng(340);
  Fn f;
  Value* a = f.in("a", test::randomNonZero(Type{F, {3, 2, 4}}, rng));
  Value* b = f.in("b", test::randomNonZero(Type{F, {3, 5, 4}}, rng));
  Value* c = f.in("c", test::randomNonZero(Type{F, {3, 1, 4}}, rng));
  Value* cat = f.b.concat({a, f.b.unary(OpKind::Exp, b), c, a}, 1);
  Value* one = f.b.concat({f.b.unary(OpKind::Sin, c)}, 0);
  Value* out = f.b.binary(OpKind::Add, f.b.unary(OpKind::Tanh, cat),
                          f.b.broadcast(f.b.reduce(OpKind::Sum, one, {1}, true), {3, 10, 4}));
  checkGrad(f, out, {a, b, c}, rng);
}

COVERS(OpKind::Gather, OpKind::ScatterAdd);
TEST(AutodiffLayout, GatherScatterAdd) {
  for (int axis : {0, 1}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    std::mt19937 rng(uint32_t(350 + axis));
    Fn f;
    Type xt{F, {4, 6}};
    Shape is = axis == 0 ? Shape{7, 6} : Shape{4, 9};
    Value* x = f.in("x", test::randomNonZero(xt, rng));
    Value* idx = f.in("idx", test::randomIndex(Type{DType::i64, is}, rng, 0, xt.shape[size_t(axis)]));
    Value* src = f.in("src", test::randomNonZero(Type{F, is}, rng));
    Value* base = f.in("base", test::randomNonZero(xt, rng));
    Value* gth = f.b.gather(f.b.unary(OpKind::Exp, x), idx, axis);
    Value* sc = f.b.scatterAdd(base, idx, f.b.binary(OpKind::Mul, src, gth), axis);
    checkGrad(f, f.b.unary(OpKind::Tanh, sc), {x, src, base}, rng);
  }
}

COVERS(OpKind::Gather, OpKind::Broadcast, OpKind::Reshape);
TEST(AutodiffLayout, EmbeddingLookup) {
  std::mt19937 rng(360);
  Fn f;
  Value* table = f.par("emb", test::randomNonZero(Type{F, {7, 5}}, rng));
  Value* tok = f.in("tok", test::randomIndex(Type{DType::i32, {6}}, rng, 0, 7));
  Value* idx = f.b.broadcast(f.b.reshape(tok, {6, 1}), {6, 5});
  checkGrad(f, f.b.gather(table, idx, 0), {table}, rng);
}

// ---------------------------------------------------------------------------------------
// Matmul

struct MatmulCase {
  Shape batchA, batchB;
};

COVERS(OpKind::Matmul);
TEST(AutodiffMatmul, FlagsAndBatching) {
  const int64_t M = 3, K = 4, N = 5;
  const std::vector<MatmulCase> cases = {{{}, {}}, {{2, 3}, {2, 3}}, {{2}, {}}, {{}, {2}}, {{2, 3}, {}}, {{}, {3, 2}}};
  for (size_t n = 0; n < cases.size(); ++n)
    for (int flags = 0; flags < 4; ++flags) {
      const MatmulCase& c = cases[n];
      bool ta = flags & 1, tb = flags & 2;
      SCOPED_TRACE("case " + std::to_string(n) + " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
      std::mt19937 rng(uint32_t(400 + 4 * n + flags));
      Fn f;
      Shape as = c.batchA, bs = c.batchB;
      as.push_back(ta ? K : M), as.push_back(ta ? M : K);
      bs.push_back(tb ? N : K), bs.push_back(tb ? K : N);
      Value* a = f.in("a", test::randomNonZero(Type{F, as}, rng));
      Value* b = f.in("b", test::randomNonZero(Type{F, bs}, rng));
      checkGrad(f, f.b.matmul(a, b, ta, tb), {a, b}, rng);
      EXPECT_EQ(countKind(f.g, OpKind::Permute), 0u) << "a transpose was materialised\n" << printModule(f.m);
    }
}

COVERS(OpKind::Matmul);
TEST(AutodiffMatmul, SharedWeightGradientIsOneGemm) {
  std::mt19937 rng(450);
  Fn f;
  Value* x = f.in("x", test::randomNonZero(Type{F, {2, 3, 4}}, rng));
  Value* w = f.par("w", test::randomNonZero(Type{F, {5, 4}}, rng));
  Value* loss = f.weightedLoss(f.b.matmul(x, w, false, true), rng);
  size_t before = f.g.ops.size();
  auto grads = appendGradients(f.g, loss, {w});
  ASSERT_EQ(grads[0]->def->kind, OpKind::Matmul);
  EXPECT_EQ(grads[0]->def->operands[0]->type.rank(), 2);
  EXPECT_EQ(grads[0]->def->operands[1]->type.rank(), 2);
  for (size_t i = before; i < f.g.ops.size(); ++i) {
    EXPECT_NE(f.g.ops[i]->kind, OpKind::Permute);
    EXPECT_FALSE(f.g.ops[i]->info().category == OpCategory::Reduction && f.g.ops[i]->operands[0]->type.rank() == 3)
        << "the batch was reduced after a batched GEMM";
  }
}

// ---------------------------------------------------------------------------------------
// Composites

COVERS(OpKind::Softmax, OpKind::LogSoftmax, OpKind::Silu);
TEST(AutodiffComposite, SoftmaxLogSoftmaxSilu) {
  struct Case {
    OpKind kind;
    int64_t axis;
  };
  const std::vector<Case> cases = {{OpKind::Softmax, -1}, {OpKind::Softmax, 1}, {OpKind::LogSoftmax, 0},
                                   {OpKind::LogSoftmax, -1}, {OpKind::Silu, 0}};
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(opInfo(c.kind).name) + " axis " + std::to_string(c.axis));
    std::mt19937 rng(uint32_t(500 + n++));
    Fn f;
    Value* x = f.in("x", test::randomNonZero(Type{F, {3, 4, 5}}, rng));
    NamedAttrs attrs;
    if (c.kind != OpKind::Silu) attrs.push_back({"axis", c.axis});
    checkGrad(f, f.b.create1(c.kind, {x}, attrs), {x}, rng);
  }
}

COVERS(OpKind::Gelu);
TEST(AutodiffComposite, Gelu) {
  for (const char* approx : {"none", "tanh"}) {
    SCOPED_TRACE(approx);
    std::mt19937 rng(uint32_t(505 + approx[0]));
    Fn f;
    Value* x = f.in("x", test::randomNonZero(Type{F, {3, 5}}, rng));
    checkGrad(f, f.b.create1(OpKind::Gelu, {x}, {{"approximate", std::string(approx)}}), {x}, rng);
  }
}

COVERS(OpKind::Dropout, OpKind::Uniform);
TEST(AutodiffComposite, DropoutUsesTheForwardsMask) {
  // The mask depends on the key and the element only, so the finite differences see a
  // linear function: the gradient is the same dropout of the upstream gradient. A uniform
  // scaling x passes a gradient to x and none to its integer operands.
  for (DType d : {F}) {
    std::mt19937 rng(517);
    Fn f;
    Value* x = f.in("x", test::randomNonZero(Type{d, {4, 6}}, rng));
    Value* key = f.in("key", test::randomIndex(Type{DType::i64, {}}, rng, 0, 1 << 30));
    Value* dropped = f.b.create1(OpKind::Dropout, {x, key}, {{"p", 0.4}, {"stream", int64_t(3)}});
    checkGrad(f, dropped, {x}, rng);
  }
  std::mt19937 rng(518);
  Fn f;
  Value* x = f.in("x", test::randomNonZero(Type{F, {8}}, rng));
  Value* c = f.in("c", test::randomIndex(Type{DType::i64, {8}}, rng, 0, 100));
  Value* u = f.b.create1(OpKind::Uniform, {c, c, c});
  checkGrad(f, f.b.binary(OpKind::Mul, x, u), {x}, rng);
}

COVERS(OpKind::LayerNorm);
TEST(AutodiffComposite, LayerNorm) {
  for (const Shape& s : {Shape{2, 3, 6}, Shape{5, 7}, Shape{6}}) {
    SCOPED_TRACE(shapeStr(s));
    std::mt19937 rng(uint32_t(515 + s.size()));
    Fn f;
    Value* x = f.in("x", test::randomNonZero(Type{F, s}, rng));
    Value* w = f.par("w", test::randomNonZero(Type{F, {s.back()}}, rng));
    Value* b = f.par("b", test::randomNonZero(Type{F, {s.back()}}, rng));
    checkGrad(f, f.b.create1(OpKind::LayerNorm, {x, w, b}, {{"eps", 1e-5}}), {x, w, b}, rng);
  }
}

COVERS(OpKind::RMSNorm);
TEST(AutodiffComposite, RMSNorm) {
  for (const Shape& s : {Shape{2, 3, 6}, Shape{5, 7}, Shape{6}}) {
    SCOPED_TRACE(shapeStr(s));
    std::mt19937 rng(uint32_t(510 + s.size()));
    Fn f;
    Value* x = f.in("x", test::randomNonZero(Type{F, s}, rng));
    Value* g = f.par("g", test::randomNonZero(Type{F, {s.back()}}, rng));
    checkGrad(f, f.b.create1(OpKind::RMSNorm, {x, g}, {{"eps", 1e-5}}), {x, g}, rng);
  }
}

COVERS(OpKind::Rope, OpKind::Neg);
TEST(AutodiffComposite, Rope) {
  for (double theta : {10000.0, 100.0}) {
    SCOPED_TRACE(theta);
    std::mt19937 rng(uint32_t(520 + theta));
    Fn f;
    Value* x = f.in("x", test::randomNonZero(Type{F, {2, 5, 6}}, rng));
    Value* pos = f.in("pos", test::randomIndex(Type{DType::i64, {5}}, rng, -3, 40));
    Value* y = f.b.create1(OpKind::Rope, {f.b.unary(OpKind::Tanh, x), pos}, {{"theta", theta}});
    checkGrad(f, y, {x}, rng);
  }
}

COVERS(OpKind::CrossEntropy);
TEST(AutodiffComposite, CrossEntropy) {
  for (const Shape& s : {Shape{6, 7}, Shape{2, 3, 5}, Shape{5}}) {
    SCOPED_TRACE(shapeStr(s));
    std::mt19937 rng(uint32_t(530 + s.size()));
    Fn f;
    Value* logits = f.in("logits", test::randomNonZero(Type{F, s}, rng));
    Shape rows(s.begin(), s.end() - 1);
    Value* t = f.in("t", test::randomIndex(Type{s.size() == 3 ? DType::i32 : DType::i64, rows}, rng, 0, s.back()));
    checkGrad(f, f.b.create1(OpKind::CrossEntropy, {logits, t}), {logits}, rng);
  }
}

COVERS(OpKind::Attention);
TEST(AutodiffComposite, Attention) {
  struct Case {
    Shape batch;
    int64_t Tq, Tk, d, dv;
    bool causal;
    int64_t kvHeads = 0;  // grouped-query attention: fewer key/value heads than q's last batch dim
  };
  const std::vector<Case> cases = {{{2}, 4, 4, 3, 5, true},      {{2}, 3, 5, 3, 2, true},
                                   {{}, 4, 6, 3, 3, false},      {{2, 2}, 3, 3, 4, 3, true},
                                   {{2, 4}, 3, 4, 3, 3, true, 2}, {{3}, 3, 3, 2, 2, false, 1}};
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE("case " + std::to_string(n));
    std::mt19937 rng(uint32_t(540 + n++));
    Fn f;
    auto sh = [&](int64_t a, int64_t b, bool kv = false) {
      Shape s = c.batch;
      if (kv && c.kvHeads > 0) s.back() = c.kvHeads;
      s.push_back(a), s.push_back(b);
      return Type{F, s};
    };
    Value* q = f.in("q", test::randomNonZero(sh(c.Tq, c.d), rng));
    Value* k = f.in("k", test::randomNonZero(sh(c.Tk, c.d, true), rng));
    Value* v = f.in("v", test::randomNonZero(sh(c.Tk, c.dv, true), rng));
    Value* o = f.b.create1(OpKind::Attention, {q, k, v}, {{"causal", c.causal}, {"scale", 0.6}});
    checkGrad(f, o, {q, k, v}, rng);
  }
}

// The VJP of attention is one attention_backward composite reading the forward's o and lse
// (no P); attention_backward itself has no derivative (no double backward).
COVERS(OpKind::AttentionBackward);
TEST(AutodiffComposite, AttentionVjpIsTheBackwardComposite) {
  std::mt19937 rng(545);
  Fn f;
  const Type t{F, {2, 4, 8}};
  Value* q = f.in("q", test::randomNonZero(t, rng));
  Value* k = f.in("k", test::randomNonZero(t, rng));
  Value* v = f.in("v", test::randomNonZero(t, rng));
  std::vector<Value*> o = f.b.create(OpKind::Attention, {q, k, v}, {{"causal", true}, {"scale", 0.5}});
  Value* loss = f.weightedLoss(o[0], rng);
  appendGradients(f.g, loss, {q, k, v});
  EXPECT_EQ(countKind(f.g, OpKind::AttentionBackward), 1u);
  EXPECT_EQ(countKind(f.g, OpKind::Matmul), 0u);
  for (auto& op : f.g.ops)
    if (op->kind == OpKind::AttentionBackward) {
      EXPECT_EQ(op->operands[3], o[0]);
      EXPECT_EQ(op->operands[5], o[1]);
    }
  Fn g;
  Value* q2 = g.in("q", test::randomNonZero(t, rng));
  std::vector<Value*> o2 = g.b.create(OpKind::Attention, {q2, q2, q2}, {{"causal", true}, {"scale", 0.5}});
  std::vector<Value*> d = g.b.create(OpKind::AttentionBackward, {q2, q2, q2, o2[0], o2[0], o2[1]},
                                     {{"causal", true}, {"scale", 0.5}});
  Value* l2 = g.weightedLoss(d[0], rng);
  EXPECT_NE(test::errorOf([&] { appendGradients(g.g, l2, {q2}); }).find("'attention_backward' has no derivative"),
            std::string::npos);
}

// Collectives come after differentiation (the data-parallel pass reduces the gradients), so
// none has a derivative: a loss that flows through one is an error, not a silent zero.
COVERS(OpKind::AllReduce, OpKind::ReduceScatter, OpKind::AllGather, OpKind::Shard);
TEST(AutodiffCollectives, HaveNoDerivative) {
  std::mt19937 rng(7);
  for (OpKind k : {OpKind::AllReduce, OpKind::ReduceScatter, OpKind::AllGather, OpKind::Shard}) {
    Fn f;
    Value* x = f.in("x", test::randomNonZero(Type{F, {4, 2}}, rng));
    Value* y = f.b.create1(k, {x}, {{"ranks", int64_t(2)}});
    Value* loss = f.weightedLoss(y, rng);
    EXPECT_NE(test::errorOf([&] { appendGradients(f.g, loss, {x}); }).find("has no derivative"), std::string::npos)
        << opInfo(k).name;
  }
}

// ---------------------------------------------------------------------------------------
// Graph-level behaviour

COVERS(OpKind::Add);
TEST(AutodiffGraph, FanOutAccumulates) {
  std::mt19937 rng(600);
  Fn f;
  Value* x = f.in("x", test::randomNonZero(Type{F, {3, 5}}, rng));
  Value* out = f.b.binary(OpKind::Sub, f.b.binary(OpKind::Mul, x, x), f.b.unary(OpKind::Sin, x));  // x used 3 times
  size_t addsBefore = countKind(f.g, OpKind::Add);
  checkGrad(f, out, {x}, rng);
  EXPECT_GE(countKind(f.g, OpKind::Add), addsBefore + 2);
}

COVERS(OpKind::Iota, OpKind::Input, OpKind::Param);
TEST(AutodiffGraph, IndependentValueGetsZeros) {
  std::mt19937 rng(610);
  Fn f;
  Value* x = f.in("x", test::randomNonZero(Type{F, {3, 4}}, rng));
  Value* z = f.par("z", test::randomNonZero(Type{F, {2, 2}}, rng));
  Value* c = f.in("c", test::randomNonZero(Type{F, {3, 4}}, rng));  // only a select condition
  Value* n = f.in("n", test::randomIndex(Type{DType::i64, {3, 4}}, rng, 0, 5));
  Value* io = f.b.cast(f.b.iota(1, Type{DType::i64, {3, 4}}), F);
  Value* cond = f.b.binary(OpKind::Gt, c, f.b.constant(0, c->type));
  Value* out = f.b.select(cond, f.b.binary(OpKind::Mul, x, io), f.b.unary(OpKind::Exp, x));
  Value* loss = f.weightedLoss(out, rng);
  auto grads = appendGradients(f.g, loss, {z, c, n, x});
  ASSERT_NO_THROW(verify(f.m));
  for (int i = 0; i < 3; ++i) {
    Value* gz = grads[size_t(i)];
    ASSERT_EQ(gz->def->kind, OpKind::Constant) << i;
    EXPECT_EQ(gz->def->attrFloat("value"), 0.0);
  }
  EXPECT_EQ(grads[0]->type, z->type);
  EXPECT_EQ(grads[1]->type, c->type);
  EXPECT_EQ(grads[2]->type, n->type);
  EXPECT_NE(grads[3]->def->kind, OpKind::Constant);
}

TEST(AutodiffGraph, LossItselfAndIntermediateValues) {
  std::mt19937 rng(620);
  Fn f;
  Value* x = f.in("x", test::randomNonZero(Type{F, {4}}, rng));
  Value* h = f.b.unary(OpKind::Exp, x);
  Value* loss = f.weightedLoss(h, rng);
  auto grads = appendGradients(f.g, loss, {loss, h, x});
  ASSERT_NO_THROW(verify(f.m));
  f.g.outputs = grads;
  auto got = interpret(f.g, f.env);
  EXPECT_EQ(got[0].get(0), 1.0);
  const HostTensor &r = f.env.at("__r"), &xv = f.env.at("x");
  for (size_t e = 0; e < 4; ++e) {
    EXPECT_FLOAT_EQ(float(got[1].get(e)), float(r.get(e)));
    EXPECT_NEAR(got[2].get(e), r.get(e) * std::exp(xv.get(e)), 1e-5 * std::exp(xv.get(e)));
  }
}

COVERS(OpKind::Kernel);
TEST(AutodiffGraph, KernelOnThePathIsAnError) {
  Fn f;
  Type t{F, {3}};
  Value* x = f.b.input("x", t);
  auto body = std::make_unique<Graph>();
  body->name = "k0";
  {
    Builder kb(*body);
    kb.output(kb.unary(OpKind::Exp, kb.input("a", t)));
  }
  Value* k = f.b.create(OpKind::Kernel, {x}, {{"name", std::string("k0")}}, {t}, std::move(body)).at(0);
  Value* loss = f.b.reduce(OpKind::Sum, k, {0});
  try {
    appendGradients(f.g, loss, {x});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel 'k0'"), std::string::npos) << e.what();
  }
  // A kernel not on the path is fine.
  Fn g;
  Value* y = g.b.input("y", t);
  auto body2 = std::make_unique<Graph>();
  body2->name = "k1";
  {
    Builder kb(*body2);
    kb.output(kb.unary(OpKind::Exp, kb.input("a", t)));
  }
  Value* k2 = g.b.create(OpKind::Kernel, {y}, {{"name", std::string("k1")}}, {t}, std::move(body2)).at(0);
  Value* other = g.b.input("o", t);
  Value* loss2 = g.b.reduce(OpKind::Sum, g.b.binary(OpKind::Mul, other, k2), {0});
  EXPECT_NO_THROW(appendGradients(g.g, loss2, {other}));
}

TEST(AutodiffGraph, IntegerPathIsAnError) {
  Fn f;
  Type t{F, {3}};
  Value* x = f.b.input("x", t);
  Value* back = f.b.cast(f.b.cast(x, DType::i64), F);
  Value* loss = f.b.reduce(OpKind::Sum, f.b.binary(OpKind::Mul, back, x), {0});
  try {
    appendGradients(f.g, loss, {x});
    FAIL() << "no error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("'cast'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("integer"), std::string::npos) << msg;
  }
}

TEST(AutodiffGraph, LossMustBeAFloatScalar) {
  Fn f;
  Value* x = f.b.input("x", Type{F, {3}});
  EXPECT_THROW(appendGradients(f.g, x, {x}), Error);
}

// A 2-layer MLP with rmsnorm and cross_entropy; the 3-D variant shares the weights across a
// batch (the folded-batch weight-gradient GEMM).
COVERS(OpKind::Matmul, OpKind::RMSNorm, OpKind::Silu, OpKind::CrossEntropy, OpKind::Broadcast, OpKind::Param);
TEST(AutodiffModel, MlpRmsnormCrossEntropy) {
  for (const Shape& rows : {Shape{5}, Shape{2, 3}}) {
    SCOPED_TRACE(shapeStr(rows));
    std::mt19937 rng(uint32_t(700 + rows.size()));
    const int64_t d = 6, hidden = 10, V = 7;
    Fn f;
    Shape xs = rows, hs = rows;
    xs.push_back(d), hs.push_back(hidden);
    Value* x = f.in("x", test::randomNonZero(Type{F, xs}, rng));
    Value* tgt = f.in("targets", test::randomIndex(Type{DType::i64, rows}, rng, 0, V));
    Value* g = f.par("norm.weight", test::randomNonZero(Type{F, {d}}, rng));
    Value* w1 = f.par("fc1.weight", test::randomNonZero(Type{F, {hidden, d}}, rng));
    Value* b1 = f.par("fc1.bias", test::randomNonZero(Type{F, {hidden}}, rng));
    Value* w2 = f.par("fc2.weight", test::randomNonZero(Type{F, {V, hidden}}, rng));
    Value* h = f.b.create1(OpKind::RMSNorm, {x, g});
    Value* a = f.b.binary(OpKind::Add, f.b.matmul(h, w1, false, true), f.b.broadcast(b1, hs));
    Value* s = f.b.create1(OpKind::Silu, {a});
    Value* logits = f.b.matmul(s, w2, false, true);
    Value* loss = f.b.create1(OpKind::CrossEntropy, {logits, tgt});
    checkLossGrad(f, loss, {x, g, w1, b1, w2});
  }
}

// ---------------------------------------------------------------------------------------
// Coverage: a new op in ir/ops.def fails here until a test gives it a gradient (or shows
// that none flows through it). Registration is static, so this holds under any filter.

TEST(AutodiffCoverage, EveryOpKindIsTested) {
  for (const OpInfo& info : allOps())
    EXPECT_TRUE(coveredKinds().count(info.kind)) << "no autodiff test covers '" << info.name << "'";
}

}  // namespace

namespace fusec {
namespace {

// The VJP table (passes/vjp_rules.h) answers for every op in ir/ops.def: an op of a
// differentiable category either has a rule or carries no gradient at all, except the few
// listed here, each with the reason it has none.
TEST(AutodiffCoverage, EveryDifferentiableOpHasARule) {
  const std::map<OpKind, const char*> without = {
      {OpKind::AttentionBackward, "a gradient itself: no second derivatives"},
  };
  for (const OpInfo& info : allOps()) {
    const OpCategory c = info.category;
    if (c != OpCategory::Pointwise && c != OpCategory::Reduction && c != OpCategory::Layout &&
        c != OpCategory::Matmul && c != OpCategory::Composite)
      continue;
    const VjpEntry& e = vjpEntry(info.kind);
    EXPECT_TRUE(e.rule || e.slots == GradSlots::None || without.count(info.kind))
        << "'" << info.name << "' has no VJP rule in passes/vjp_rules.cpp";
    EXPECT_FALSE(e.rule && e.slots == GradSlots::None) << "'" << info.name << "' has a rule but carries no gradient";
  }
}

}  // namespace
}  // namespace fusec
