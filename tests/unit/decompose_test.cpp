// Tests of the decompose pass (passes/decompose.cpp): for every composite op, the decomposed
// graph verifies, holds no composite, and interprets to the composite's value (random
// non-zero inputs, odd sizes, norm-wise relative error); the tiny model's forward and three
// train steps agree with and without decompose; gradients of the decomposed forward agree
// with those of the composite forward. The last case-table test fails when a Composite op
// in ir/ops.def has no case here (and so, possibly, no decomposition).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "frontend/init.h"
#include "frontend/models/transformer.h"
#include "ir/verifier.h"
#include "passes/autodiff.h"
#include "passes/decompose.h"
#include "passes/pass.h"
#include "test_util.h"

using namespace fusec;

namespace {

// Magnitudes in [0.5, 2] with random signs: never zero.
// ||got - want|| / ||want||, with NaN/inf anywhere counting as a failure.
double relError(const HostTensor& got, const HostTensor& want) {
  EXPECT_EQ(got.type, want.type);
  double num = 0, den = 0;
  for (size_t k = 0; k < want.size(); ++k) {
    double d = got.get(k) - want.get(k);
    num += d * d;
    den += want.get(k) * want.get(k);
  }
  if (num == 0) return 0;  // equal, zeros included (a dropped scalar: 0 / 0)
  double r = std::sqrt(num / den);
  return std::isfinite(r) ? r : INFINITY;
}

size_t countCategory(const Graph& g, OpCategory c) {
  size_t n = 0;
  for (auto& op : g.ops) {
    n += op->info().category == c;
    if (op->body) n += countCategory(*op->body, c);
  }
  return n;
}

bool decompose(Module& m) { return createPass("decompose")->run(m); }

// Decomposes a copy of `m` and checks it against the original on `env`, output by output.
void expectDecomposedMatches(const Module& m, const Bindings& env, double rtol) {
  auto d = cloneModule(m);
  EXPECT_TRUE(decompose(*d));
  ASSERT_NO_THROW(verify(*d));
  const Graph &before = *m.funcs.at(0), &after = *d->funcs.at(0);
  EXPECT_EQ(countCategory(after, OpCategory::Composite), 0u);
  std::vector<HostTensor> want = interpret(before, env), got = interpret(after, env);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_LE(relError(got[i], want[i]), rtol) << "output " << i;
}

// ---------------------------------------------------------------------------------------
// One case per composite configuration

struct Case {
  OpKind kind;
  std::string label;
  // Builds the composite on inputs bound in `f`; returns its result.
  std::function<Value*(test::GraphUnderTest& f, std::mt19937& rng)> build;
};

Value* unaryCase(test::GraphUnderTest& f, std::mt19937& rng, OpKind k, const Type& t, const NamedAttrs& attrs) {
  return f.b.create1(k, {f.in("x", test::randomNonZero(t, rng))}, attrs);
}

Value* normCase(test::GraphUnderTest& f, std::mt19937& rng, OpKind k, const Shape& s) {
  const Type w{DType::f32, {s.back()}};
  std::vector<Value*> ops{f.in("x", test::randomNonZero({DType::f32, s}, rng)), f.par("w", test::randomNonZero(w, rng))};
  if (k == OpKind::LayerNorm) ops.push_back(f.par("b", test::randomNonZero(w, rng)));
  return f.b.create1(k, ops, {{"eps", 1e-5}});
}

Value* ropeCase(test::GraphUnderTest& f, std::mt19937& rng, const Shape& s, int64_t maxPos, double theta) {
  const int64_t T = s[s.size() - 2];
  Value* pos = f.in("pos", test::randomIndex({DType::i64, {T}}, rng, -3, maxPos));
  return f.b.create1(OpKind::Rope, {f.in("x", test::randomNonZero({DType::f32, s}, rng)), pos}, {{"theta", theta}});
}

Value* ceCase(test::GraphUnderTest& f, std::mt19937& rng, const Shape& s, DType idx) {
  Shape rows(s.begin(), s.end() - 1);
  Value* t = f.in("t", test::randomIndex({idx, rows}, rng, 0, s.back()));
  return f.b.create1(OpKind::CrossEntropy, {f.in("logits", test::randomNonZero({DType::f32, s}, rng)), t});
}

// `kvHeads` (0: q's): grouped-query attention's k and v with fewer heads (the last batch dim).
Value* attentionCase(test::GraphUnderTest& f, std::mt19937& rng, Shape batch, int64_t Tq, int64_t Tk, bool causal,
                     int64_t kvHeads = 0) {
  auto sh = [&](int64_t a, int64_t b, bool kv = false) {
    Shape s = batch;
    if (kv && kvHeads > 0) s.back() = kvHeads;
    s.push_back(a), s.push_back(b);
    return Type{DType::f32, s};
  };
  Value* q = f.in("q", test::randomNonZero(sh(Tq, 5), rng));
  Value* k = f.in("k", test::randomNonZero(sh(Tk, 5, true), rng));
  Value* v = f.in("v", test::randomNonZero(sh(Tk, 3, true), rng));
  return f.b.create1(OpKind::Attention, {q, k, v}, {{"causal", causal}, {"scale", 0.45}});
}

// attention's lse (result 1), or result `which` of attention_backward on random inputs
// (its formula holds for any o, do, lse, so they need not come from a forward). `gqa`: 4
// query heads over 2 key/value heads.
Value* attentionResultCase(test::GraphUnderTest& f, std::mt19937& rng, bool backward, int which, bool gqa = false) {
  const Type t{DType::f32, {2, 4, 5, 8}}, rows{DType::f32, {2, 4, 5}}, kv{DType::f32, {2, gqa ? 2 : 4, 5, 8}};
  Value* q = f.in("q", test::randomNonZero(t, rng));
  Value* k = f.in("k", test::randomNonZero(kv, rng));
  Value* v = f.in("v", test::randomNonZero(kv, rng));
  const NamedAttrs at = {{"causal", true}, {"scale", 0.4}};
  if (!backward) return f.b.create(OpKind::Attention, {q, k, v}, at).at(size_t(which));
  Value* o = f.in("o", test::randomNonZero(t, rng));
  Value* dO = f.in("do", test::randomNonZero(t, rng));
  Value* lse = f.in("lse", test::randomNonZero(rows, rng));
  return f.b.create(OpKind::AttentionBackward, {q, k, v, o, dO, lse}, at).at(size_t(which));
}

const Type kX{DType::f32, {3, 4, 7}};

// Dropout's decomposition (iotas, uniform, a select) draws the interpreter's mask exactly.
Value* dropoutCase(test::GraphUnderTest& f, std::mt19937& rng, const Type& t, double p, int64_t stream) {
  Value* x = f.in("x", test::randomNonZero(t, rng));
  Value* key = f.in("key", test::randomIndex({DType::i64, {}}, rng, 0, int64_t(1) << 40));
  return f.b.create1(OpKind::Dropout, {x, key}, {{"p", p}, {"stream", stream}});
}

const std::vector<Case>& cases() {
  using F = test::GraphUnderTest;
  using R = std::mt19937;
  static const std::vector<Case> c = {
      {OpKind::Softmax, "last axis", [](F& f, R& r) { return unaryCase(f, r, OpKind::Softmax, kX, {{"axis", -1}}); }},
      {OpKind::Softmax, "axis 0", [](F& f, R& r) { return unaryCase(f, r, OpKind::Softmax, kX, {{"axis", 0}}); }},
      {OpKind::Softmax, "axis 1", [](F& f, R& r) { return unaryCase(f, r, OpKind::Softmax, kX, {{"axis", 1}}); }},
      {OpKind::LogSoftmax, "last", [](F& f, R& r) { return unaryCase(f, r, OpKind::LogSoftmax, kX, {{"axis", 2}}); }},
      {OpKind::LogSoftmax, "axis 1", [](F& f, R& r) { return unaryCase(f, r, OpKind::LogSoftmax, kX, {{"axis", 1}}); }},
      {OpKind::Silu, "", [](F& f, R& r) { return unaryCase(f, r, OpKind::Silu, kX, {}); }},
      {OpKind::Gelu, "none", [](F& f, R& r) { return unaryCase(f, r, OpKind::Gelu, kX, {}); }},
      {OpKind::Gelu, "tanh",
       [](F& f, R& r) { return unaryCase(f, r, OpKind::Gelu, kX, {{"approximate", std::string("tanh")}}); }},
      {OpKind::RMSNorm, "3d", [](F& f, R& r) { return normCase(f, r, OpKind::RMSNorm, {2, 3, 7}); }},
      {OpKind::RMSNorm, "1d", [](F& f, R& r) { return normCase(f, r, OpKind::RMSNorm, {9}); }},
      {OpKind::LayerNorm, "3d", [](F& f, R& r) { return normCase(f, r, OpKind::LayerNorm, {2, 3, 7}); }},
      {OpKind::LayerNorm, "1d", [](F& f, R& r) { return normCase(f, r, OpKind::LayerNorm, {9}); }},
      {OpKind::Rope, "heads", [](F& f, R& r) { return ropeCase(f, r, {2, 3, 5, 6}, 40, 10000); }},
      {OpKind::Rope, "rank 2, far positions", [](F& f, R& r) { return ropeCase(f, r, {7, 10}, 3000, 500); }},
      {OpKind::CrossEntropy, "3d i64", [](F& f, R& r) { return ceCase(f, r, {2, 3, 7}, DType::i64); }},
      {OpKind::CrossEntropy, "2d i32", [](F& f, R& r) { return ceCase(f, r, {5, 11}, DType::i32); }},
      {OpKind::CrossEntropy, "one row", [](F& f, R& r) { return ceCase(f, r, {7}, DType::i64); }},
      {OpKind::Attention, "causal", [](F& f, R& r) { return attentionCase(f, r, {2}, 5, 5, true); }},
      {OpKind::Attention, "causal Tq < Tk", [](F& f, R& r) { return attentionCase(f, r, {2}, 3, 6, true); }},
      {OpKind::Attention, "full, no batch", [](F& f, R& r) { return attentionCase(f, r, {}, 4, 7, false); }},
      {OpKind::Attention, "heads", [](F& f, R& r) { return attentionCase(f, r, {2, 3}, 5, 5, true); }},
      {OpKind::Attention, "grouped kv heads", [](F& f, R& r) { return attentionCase(f, r, {2, 6}, 4, 5, true, 2); }},
      {OpKind::Attention, "one kv head", [](F& f, R& r) { return attentionCase(f, r, {3}, 4, 4, false, 1); }},
      {OpKind::Attention, "lse", [](F& f, R& r) { return attentionResultCase(f, r, false, 1); }},
      {OpKind::AttentionBackward, "dq", [](F& f, R& r) { return attentionResultCase(f, r, true, 0); }},
      {OpKind::AttentionBackward, "dk", [](F& f, R& r) { return attentionResultCase(f, r, true, 1); }},
      {OpKind::AttentionBackward, "dv", [](F& f, R& r) { return attentionResultCase(f, r, true, 2); }},
      {OpKind::AttentionBackward, "dq grouped", [](F& f, R& r) { return attentionResultCase(f, r, true, 0, true); }},
      {OpKind::AttentionBackward, "dk grouped", [](F& f, R& r) { return attentionResultCase(f, r, true, 1, true); }},
      {OpKind::AttentionBackward, "dv grouped", [](F& f, R& r) { return attentionResultCase(f, r, true, 2, true); }},
      {OpKind::Dropout, "3d", [](F& f, R& r) { return dropoutCase(f, r, {DType::f32, {2, 3, 7}}, 0.3, 5); }},
      {OpKind::Dropout, "bf16 1d", [](F& f, R& r) { return dropoutCase(f, r, {DType::bf16, {40}}, 0.5, 0); }},
      {OpKind::Dropout, "scalar", [](F& f, R& r) { return dropoutCase(f, r, {DType::f32, {}}, 0.1, 2); }},
      {OpKind::Dropout, "p = 0", [](F& f, R& r) { return dropoutCase(f, r, {DType::f32, {4, 5}}, 0.0, 1); }},
  };
  return c;
}

TEST(Decompose, EachCompositeMatchesTheInterpreter) {
  int n = 0;
  for (const Case& c : cases()) {
    SCOPED_TRACE(std::string(opInfo(c.kind).name) + " " + c.label);
    std::mt19937 rng(uint32_t(900 + n++));
    test::GraphUnderTest f;
    f.b.output(c.build(f, rng));
    ASSERT_EQ(f.g.ops.back()->kind, c.kind);
    expectDecomposedMatches(f.m, f.env, 1e-6);
  }
}

// The same composite inside a kernel body is decomposed there, and the kernel still binds.
TEST(Decompose, KernelBodies) {
  std::mt19937 rng(950);
  test::GraphUnderTest f;
  HostTensor xv = test::randomNonZero(kX, rng);
  auto body = std::make_unique<Graph>();
  body->name = "k0";
  Builder bb(*body);
  Value* a = bb.input("a", kX);
  bb.output(bb.create1(OpKind::Gelu, {bb.create1(OpKind::Softmax, {a})}));
  Value* x = f.in("x", xv);
  f.b.output(f.b.create(OpKind::Kernel, {x}, {{"name", std::string("k0")}}, {kX}, std::move(body)).at(0));
  expectDecomposedMatches(f.m, f.env, 1e-6);
}

TEST(Decompose, NoCompositeNoChange) {
  std::mt19937 rng(951);
  test::GraphUnderTest f;
  f.b.output(f.b.unary(OpKind::Exp, f.in("x", test::randomNonZero(kX, rng))));
  EXPECT_FALSE(decompose(f.m));
  EXPECT_EQ(f.g.ops.size(), 2u);
}

// bf16 composites decompose into bf16 arithmetic (only rope's angles are f32, cast once),
// so the result is close but rounded at every step.
TEST(Decompose, Bf16StaysBf16) {
  std::mt19937 rng(952);
  test::GraphUnderTest f;
  const Type t{DType::bf16, {3, 8}};
  Value* x = f.in("x", test::randomNonZero(t, rng));
  Value* w = f.par("w", test::randomNonZero({DType::bf16, {8}}, rng));
  Value* p = f.in("pos", test::randomIndex({DType::i64, {3}}, rng, 0, 30));
  f.b.output(f.b.create1(OpKind::Softmax, {x}));
  f.b.output(f.b.create1(OpKind::RMSNorm, {x, w}));
  f.b.output(f.b.create1(OpKind::Rope, {x, p}));
  f.b.output(f.b.create1(OpKind::Gelu, {x}));
  expectDecomposedMatches(f.m, f.env, 2e-2);
  auto d = cloneModule(f.m);
  decompose(*d);
  for (auto& op : d->funcs[0]->ops) {
    DType dt = op->result()->type.dtype;
    if (dt == DType::f32) {
      // Rope's frequencies and angles (iota, constants, pow, cast of the positions, cos/sin).
      EXPECT_TRUE(op->kind == OpKind::Iota || op->kind == OpKind::Constant || op->kind == OpKind::Mul ||
                  op->kind == OpKind::Div || op->kind == OpKind::Pow || op->kind == OpKind::Cast ||
                  op->kind == OpKind::Reshape || op->kind == OpKind::Broadcast || op->kind == OpKind::Cos ||
                  op->kind == OpKind::Sin)
          << opInfo(op->kind).name;
    }
  }
}

// Every Composite op of ops.def has a case above: a new composite fails here until it gets a
// decomposition and a semantic test.
TEST(Decompose, EveryCompositeHasACase) {
  for (const OpInfo& info : allOps()) {
    if (info.category != OpCategory::Composite) continue;
    bool found = false;
    for (const Case& c : cases()) found = found || c.kind == info.kind;
    EXPECT_TRUE(found) << "no decompose case for '" << info.name << "'";
  }
}

// ---------------------------------------------------------------------------------------
// The tiny model

models::ModelConfig tiny() { return models::namedConfig("tiny"); }

HostTensor ids(int64_t B, int64_t T, int64_t vocab, std::mt19937& rng) {
  return test::randomIndex({DType::i64, {B, T}}, rng, 0, vocab);
}

TEST(DecomposeModel, TinyForward) {
  const auto cfg = tiny();
  const int64_t B = 2, T = 7;
  Module m;
  models::buildForward(m, cfg, B, T);
  Bindings env = initParameters(cfg, 7);
  std::mt19937 rng(960);
  env["ids"] = ids(B, T, cfg.vocab, rng);
  expectDecomposedMatches(m, env, 1e-6);
}

// Three AdamW steps, each feeding the updated weights and moments back as params.
TEST(DecomposeModel, TinyTrainStepThreeSteps) {
  const auto cfg = tiny();
  const int64_t B = 2, T = 6;
  Module m;
  Graph& g = models::buildTrainStep(m, cfg, B, T, models::AdamWConfig{});
  auto d = cloneModule(m);
  ASSERT_TRUE(decompose(*d));
  ASSERT_NO_THROW(verify(*d));
  const Graph& dg = *d->funcs.at(0);
  EXPECT_EQ(countCategory(dg, OpCategory::Composite), 0u);

  Bindings env = initParameters(cfg, 8);
  for (auto& [k, v] : initAdamState(cfg)) env[k] = v;
  std::mt19937 rng(961);
  env["ids"] = ids(B, T, cfg.vocab, rng);
  env["targets"] = ids(B, T, cfg.vocab, rng);
  Bindings envD = env;
  for (int step = 1; step <= 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    HostTensor s = HostTensor::zeros({DType::f32, {}});
    s.set(0, step);
    env["step"] = envD["step"] = s;
    std::vector<HostTensor> want = interpret(g, env), got = interpret(dg, envD);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LE(relError(got[0], want[0]), 1e-6) << "loss " << got[0].get(0) << " vs " << want[0].get(0);
    for (size_t i = 1; i < want.size(); ++i) {
      EXPECT_LE(relError(got[i], want[i]), 1e-6) << "output " << i << " -> " << g.updateOf(i);
      env[g.updateOf(i)] = want[i];
      envD[dg.updateOf(i)] = got[i];
    }
  }
}

// appendGradients of the decomposed loss vs of the composite loss, w.r.t. every weight.
TEST(DecomposeModel, TinyGradientsAgree) {
  const auto cfg = tiny();
  const int64_t B = 2, T = 6;
  Module m;
  Graph& g = m.add("loss");
  Builder b(g);
  fe::Tensor idsT = fe::input(b, "ids", {DType::i64, {B, T}});
  fe::Tensor tgt = fe::input(b, "targets", {DType::i64, {B, T}});
  auto params = models::declareParameters(b, cfg);
  fe::Tensor loss = fe::crossEntropy(models::traceLogits(cfg, params, idsT), tgt);
  g.outputs = {loss.value()};
  // As a program builder would: decompose the traced loss graph, then differentiate it.
  auto d = cloneModule(m);
  Graph& dg = *d->funcs.at(0);
  ASSERT_TRUE(decomposeGraph(dg));

  auto withGradients = [&](Graph& graph) {
    std::vector<Value*> wrt;
    for (const auto& s : models::parameterSpecs(cfg)) wrt.push_back(graph.findParam(s.name)->result());
    for (Value* gv : appendGradients(graph, graph.outputs.at(0), wrt)) graph.outputs.push_back(gv);
  };
  withGradients(g);
  withGradients(dg);
  ASSERT_NO_THROW(verify(m));
  ASSERT_NO_THROW(verify(*d));
  EXPECT_EQ(countCategory(dg, OpCategory::Composite), 0u);

  Bindings env = initParameters(cfg, 9);
  std::mt19937 rng(962);
  env["ids"] = ids(B, T, cfg.vocab, rng);
  env["targets"] = ids(B, T, cfg.vocab, rng);
  std::vector<HostTensor> want = interpret(g, env), got = interpret(dg, env);
  ASSERT_EQ(got.size(), want.size());
  const auto specs = models::parameterSpecs(cfg);
  EXPECT_LE(relError(got[0], want[0]), 1e-6);
  for (size_t i = 1; i < want.size(); ++i)
    EXPECT_LE(relError(got[i], want[i]), 1e-5) << "d loss / d " << specs[i - 1].name;
}

}  // namespace
