// Tests of the program passes autodiff, adamw, autocast and cache-weight-casts on the tiny
// transformer and the toy model: the pass-built training step is bit-identical to the one
// traced in one go, the autocast policy holds op by op, the bf16 programs agree with f32
// within bf16 tolerance, and cached weight casts change nothing when W.bf16 = bf16(W).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "frontend/init.h"
#include "frontend/models/toy.h"
#include "frontend/models/transformer.h"
#include "ir/interpreter.h"
#include "ir/parser.h"
#include "ir/roles.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/autodiff.h"
#include "passes/decompose.h"
#include "passes/pass.h"
#include "passes/pipeline.h"
#include "test_util.h"

namespace fusec {
namespace {

using models::ModelConfig;

constexpr int64_t B = 2, T = 5;

// Values of magnitude 0.5..2 with random signs (never zero); `positive` for second moments.
// Every input and param of `g`: token ids in [0, vocab), the step 3, weights ~0.3, state.
Bindings randomBindings(const Graph& g, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  Bindings env;
  for (auto& op : g.ops) {
    if (op->kind != OpKind::Input && op->kind != OpKind::Param) continue;
    const std::string& name = op->attrStr("name");
    const Type& t = op->result()->type;
    if (!isFloat(t.dtype)) {
      HostTensor h = HostTensor::zeros(t);
      std::uniform_int_distribution<int64_t> id(0, vocab - 1);
      for (auto& v : h.i) v = id(rng);
      env[name] = h;
    } else if (op->kind == OpKind::Input && roleOf(*op) == Role::StepCount) {
      env[name] = HostTensor::zeros(t);
      env[name].set(0, 3);
    } else {
      const bool sq = op->kind == OpKind::Param && roleOf(*op) == Role::ExpAvgSq;
      env[name] = test::randomNonZero(t, rng, sq ? 0.01 : 0.3, sq);
    }
  }
  return env;
}

bool sameBits(const HostTensor& a, const HostTensor& b) {
  if (a.type != b.type) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (std::bit_cast<uint32_t>(a.f.at(k)) != std::bit_cast<uint32_t>(b.f.at(k))) return false;
  return true;
}

void runPasses(Module& m, const std::vector<std::string>& names) {
  for (const auto& n : names) {
    createPass(n)->run(m);
    ASSERT_NO_THROW(verify(m)) << "after " << n << "\n" << printModule(m);
  }
}

// The training step as models::buildTrainStep traced it before it became passes: state
// declared up front, then the loss, appendGradients and AdamW, in one builder.
Graph& referenceTrainStep(Module& m, const ModelConfig& cfg, const fe::AdamWConfig& opt) {
  Graph& g = m.add("train_step");
  Builder b(g);
  fe::Tensor ids = fe::input(b, "ids", Type{DType::i64, {B, T}}, Role::TokenIds).named("ids");
  fe::Tensor targets = fe::input(b, "targets", Type{DType::i64, {B, T}}, Role::Targets).named("targets");
  fe::Tensor step = fe::input(b, "step", Type{DType::f32, {}}, Role::StepCount).named("step");
  auto params = models::declareParameters(b, cfg);
  auto specs = models::parameterSpecs(cfg);
  std::vector<fe::Tensor> m1, v1;
  for (auto& s : specs) {
    m1.push_back(fe::param(b, s.name + ".exp_avg", Type{DType::f32, s.shape}, s.layer));
    setRole(*m1.back().value()->def, Role::ExpAvg, s.name);
    v1.push_back(fe::param(b, s.name + ".exp_avg_sq", Type{DType::f32, s.shape}, s.layer));
    setRole(*v1.back().value()->def, Role::ExpAvgSq, s.name);
  }
  fe::Tensor loss = fe::crossEntropy(models::traceLogits(cfg, params, ids), targets);
  std::vector<Value*> wrt;
  for (auto& s : specs) wrt.push_back(params.at(s.name).value());
  std::vector<Value*> grads = appendGradients(g, loss.value(), wrt);
  fe::AdamW adamw(opt, step);
  g.addOutput(loss.value());
  for (size_t i = 0; i < specs.size(); ++i) {
    auto u = adamw.update(params.at(specs[i].name), fe::Tensor(&b, grads[i]), m1[i], v1[i]);
    g.addOutput(u.param.value(), specs[i].name);
    g.addOutput(u.expAvg.value(), specs[i].name + ".exp_avg");
    g.addOutput(u.expAvgSq.value(), specs[i].name + ".exp_avg_sq");
  }
  return g;
}

TEST(TrainPasses, TrainStepViaPassesIsBitExact) {
  const ModelConfig cfg = models::namedConfig("tiny");
  fe::AdamWConfig opt;
  opt.lr = 0.01;
  Module oldM, newM;
  Graph& want = referenceTrainStep(oldM, cfg, opt);
  Graph& got = models::buildTrainStep(newM, cfg, B, T, opt);
  ASSERT_NO_THROW(verify(newM));
  ASSERT_EQ(got.outputs.size(), want.outputs.size());
  EXPECT_EQ(got.outputUpdates, want.outputUpdates);
  std::vector<std::string> wantSig, gotSig;
  for (Op* op : want.inputs()) wantSig.push_back(op->attrStr("name"));
  for (Op* op : want.params()) wantSig.push_back(op->attrStr("name"));
  for (Op* op : got.inputs()) gotSig.push_back(op->attrStr("name"));
  for (Op* op : got.params()) gotSig.push_back(op->attrStr("name"));
  EXPECT_EQ(gotSig, wantSig);
  EXPECT_EQ(got.outputs[1]->name, "token_embeddings.weight.new");
  EXPECT_EQ(got.outputs[3]->name, "token_embeddings.weight.exp_avg_sq.new");

  Bindings env = randomBindings(want, cfg.vocab, 1);
  auto a = interpret(want, env), b = interpret(got, env);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(sameBits(a[i], b[i])) << "output " << i;
}

TEST(TrainPasses, AutodiffAndAdamWRejectOtherSignatures) {
  Module m;
  models::buildForward(m, models::namedConfig("tiny"), B, T);
  EXPECT_EQ(test::errorOf([&] { createPass("autodiff")->run(m); }),
            "autodiff: @forward must return exactly one float scalar (the loss), it returns 1 value(s), the first "
            "f32[2,5,37]");
  EXPECT_NE(test::errorOf([&] { createPass("adamw")->run(m); }).find("adamw: @forward must return the loss"),
            std::string::npos);
  Module loss;
  models::buildTrainLoss(loss, models::namedConfig("tiny"), B, T);
  runPasses(loss, {"autodiff", "adamw"});
  EXPECT_NE(test::errorOf([&] { createPass("autodiff")->run(loss); }).find("must return exactly one float scalar"),
            std::string::npos);
}

// A function with a cotangent input becomes its VJP: the gradients w.r.t. its float data
// inputs (d<name>) and weights (<name>.grad), seeded with the cotangent.
TEST(TrainPasses, AutodiffMakesTheVjpOfAFunctionWithACotangent) {
  auto m = parseModule(R"(func @f {
  %x = input() {name = "x"} : f32[3]
  %ids = input() {name = "ids", role = "ids"} : i64[3]
  %c = input() {name = "c", role = "cotangent"} : f32[3]
  %w = param() {name = "w"} : f32[3]
  %y = mul(%x, %w) : f32[3]
  %e = exp(%y) : f32[3]
  return %e
})");
  createPass("autodiff")->run(*m);
  const Graph& g = *m->funcs.at(0);
  ASSERT_EQ(g.outputs.size(), 2u);
  EXPECT_EQ(g.outputs[0]->name, "dx");
  EXPECT_EQ(g.outputs[1]->name, "w.grad");
  auto tensor = [](std::vector<float> v) {
    HostTensor t = HostTensor::zeros(test::f32({3}));
    t.f = std::move(v);
    return t;
  };
  Bindings env;
  env["x"] = tensor({0.5f, -1.f, 2.f});
  env["w"] = tensor({1.5f, 0.25f, -0.5f});
  env["c"] = tensor({2.f, -3.f, 0.5f});
  env["ids"] = HostTensor::zeros(Type{DType::i64, {3}});
  const std::vector<HostTensor> got = interpret(g, env);
  for (size_t i = 0; i < 3; ++i) {
    const double x = env["x"].get(i), w = env["w"].get(i), c = env["c"].get(i), e = std::exp(x * w);
    EXPECT_NEAR(got[0].get(i), c * e * w, 1e-5 * std::abs(c * e * w) + 1e-6);
    EXPECT_NEAR(got[1].get(i), c * e * x, 1e-5 * std::abs(c * e * x) + 1e-6);
  }
}

TEST(TrainPasses, AutodiffRefusesAVjpItCannotMake) {
  // A function body with a cotangent input, and the one line autodiff refuses it with.
  struct Case {
    const char* body;
    const char* error;
  };
  const Case cases[] = {
      {"%x = input() {name = \"x\"} : f32[3]\n%c = input() {name = \"c\", role = \"cotangent\"} : f32[3]\n"
       "%e = exp(%x) : f32[3]\nreturn %e, %x",
       "autodiff: @f has the cotangent input 'c' and must return exactly one value, it returns 2"},
      {"%x = input() {name = \"x\"} : f32[3]\n%c = input() {name = \"c\", role = \"cotangent\"} : f32[4]\n"
       "%e = exp(%x) : f32[3]\nreturn %e",
       "autodiff: the cotangent f32[4] must have its output's shape, f32[3]"},
      {"%ids = input() {name = \"ids\", role = \"ids\"} : i64[3]\n%c = input() {name = \"c\", role = \"cotangent\"} : "
       "f32[3]\n%x = cast(%ids) : f32[3]\nreturn %x",
       "autodiff: @f has the cotangent input 'c' but no float data input or weight to differentiate"},
  };
  for (const Case& c : cases) {
    auto m = parseModule(std::string("func @f {\n") + c.body + "\n}");
    EXPECT_EQ(test::errorOf([&] { createPass("autodiff")->run(*m); }), c.error);
  }
}

// The tiny transformer's loss, decomposed and autocast (and differentiated when `grads`).
std::unique_ptr<Module> tinyLoss(bool bf16, bool grads) {
  auto m = std::make_unique<Module>();
  models::buildTrainLoss(*m, models::namedConfig("tiny"), B, T);
  std::vector<std::string> passes = {"decompose"};
  if (bf16) passes.push_back("autocast");
  if (grads) passes.push_back("autodiff");
  runPasses(*m, passes);
  return m;
}

TEST(Autocast, PolicyOnTinyTransformer) {
  auto m = tinyLoss(true, true);
  const Graph& g = *m->funcs[0];
  const Op* lossDef = g.outputs[0]->def;
  int matmuls = 0, reductions = 0;
  bool forward = true;  // reductions before the loss take f32; backward ones follow the VJPs
  for (auto& op : g.ops) {
    if (op->kind == OpKind::Matmul) {  // forward and backward GEMMs alike
      ++matmuls;
      for (Value* v : op->operands) EXPECT_EQ(v->type.dtype, DType::bf16) << printModule(*m);
      EXPECT_EQ(op->result()->type.dtype, DType::bf16);
    }
    if (forward && op->info().category == OpCategory::Reduction && isFloat(op->operands[0]->type.dtype)) {
      ++reductions;
      EXPECT_EQ(op->operands[0]->type.dtype, DType::f32);
    }
    forward = forward && op.get() != lossDef;
  }
  // Per layer q, k, v, scores, probs @ v, output, w1, w3, w2, plus lm_head; backward: two each.
  EXPECT_EQ(matmuls, 3 * (2 * 9 + 1));
  EXPECT_GT(reductions, 0);
  EXPECT_EQ(g.outputs[0]->type, (Type{DType::f32, {}}));
  auto params = g.params();
  ASSERT_EQ(g.outputs.size(), 1 + params.size());
  for (size_t i = 0; i < params.size(); ++i) EXPECT_EQ(g.outputs[1 + i]->type, params[i]->result()->type);
  for (Op* p : params) EXPECT_EQ(p->result()->type.dtype, DType::f32);
}

TEST(Autocast, SecondRunChangesNothing) {
  auto m = tinyLoss(true, false);
  std::string once = printModule(*m);
  EXPECT_FALSE(createPass("autocast")->run(*m));
  EXPECT_EQ(printModule(*m), once);
}

// bf16 against f32 on the interpreter: norm-wise relative error within bf16 tolerance.
TEST(Autocast, TinyLossAndGradientsCloseToF32) {
  auto f32 = tinyLoss(false, true), bf16 = tinyLoss(true, true);
  // The model's own initialisation (truncated normal, non-zero) for the weights.
  Bindings env = randomBindings(*f32->funcs[0], 37, 5);
  for (auto& [name, t] : initParameters(models::namedConfig("tiny"), 5)) env[name] = t;
  auto want = interpret(*f32->funcs[0], env), got = interpret(*bf16->funcs[0], env);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_LT(test::normRelError(got[i], want[i]), 2e-2) << "output " << i;
}

TEST(Autocast, TinyForwardCloseToF32) {
  Module f32, bf16;
  models::buildForward(f32, models::namedConfig("tiny"), B, T);
  models::buildForward(bf16, models::namedConfig("tiny"), B, T);
  runPasses(f32, {"decompose"});
  runPasses(bf16, {"decompose", "autocast"});
  EXPECT_EQ(bf16.funcs[0]->outputs[0]->type.dtype, DType::bf16);  // logits, as torch gives them
  Bindings env = randomBindings(*f32.funcs[0], 37, 6);
  for (auto& [name, t] : initParameters(models::namedConfig("tiny"), 6)) env[name] = t;
  double err = test::normRelError(interpret(*bf16.funcs[0], env)[0], interpret(*f32.funcs[0], env)[0]);
  EXPECT_LT(err, 2e-2);
  EXPECT_GT(err, 0);  // it did compute in bf16
}

// Runs cache-weight-casts on `m` and checks its meaning: with W.bf16 = bf16(W) bound, the
// same outputs bit for bit, plus one refreshed copy per updated weight equal to bf16(new W).
// No cast is left reading a weight, directly or through layout views. Returns the copies.
std::vector<std::string> checkCachedCastsKeepResults(Module& m) {
  auto before = cloneModule(m);
  EXPECT_TRUE(createPass("cache-weight-casts")->run(m));
  EXPECT_NO_THROW(verify(m));
  const Graph& g = *m.funcs[0];
  for (auto& op : g.ops) {
    if (op->kind != OpKind::Cast) continue;
    const Op* src = op->operands[0]->def;
    while (src->kind == OpKind::Permute || src->kind == OpKind::Reshape) src = src->operands[0]->def;
    EXPECT_FALSE(src->kind == OpKind::Param && roleOf(*src) == Role::Weight && op->result()->type.dtype == DType::bf16)
        << printModule(m);
  }

  Bindings env = randomBindings(*before->funcs[0], 37, 9);
  std::vector<std::string> copies;
  for (Op* p : g.params()) {
    const std::string& name = p->attrStr("name");
    if (roleOf(*p) != Role::WeightCopy) continue;
    const HostTensor& w = env.at(ownerOf(*p));
    HostTensor c = HostTensor::zeros(p->result()->type);
    for (size_t k = 0; k < c.size(); ++k) c.set(k, w.f[k]);
    env[name] = c;
    copies.push_back(name);
  }
  auto want = interpret(*before->funcs[0], env), got = interpret(g, env);
  EXPECT_GE(got.size(), want.size());
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) EXPECT_TRUE(sameBits(got[i], want[i])) << "output " << i;
  for (size_t i = want.size(); i < got.size(); ++i) {
    const std::string& target = g.updateOf(i);
    const std::string weight = target.substr(0, target.size() - 5);
    size_t w = 0;
    while (g.updateOf(w) != weight) ++w;
    for (size_t k = 0; k < got[i].size(); ++k) EXPECT_EQ(got[i].f[k], roundToBF16(got[w].f[k])) << target;
  }
  EXPECT_FALSE(createPass("cache-weight-casts")->run(m));
  return copies;
}

TEST(CacheWeightCasts, SameResultsWhenCopiesAreBound) {
  Module m;
  models::buildTrainLoss(m, models::namedConfig("tiny"), B, T);
  for (auto& p : programPasses("train_step", DType::bf16, fe::AdamWConfig{})) {
    if (p->name() == "cache-weight-casts") break;
    p->run(m);
  }
  const size_t outputs = m.funcs[0]->outputs.size();
  auto copies = checkCachedCastsKeepResults(m);
  EXPECT_EQ(copies.size(), 2u * 7 + 1);  // every Linear weight; the embedding is gathered in f32
  EXPECT_EQ(m.funcs[0]->outputs.size(), outputs + copies.size());
}

// An imported nn.Linear reads its weight as x @ permute(W): the bf16 training step of such a
// model (autocast's cast after the permute) keeps no weight cast, and computes the same.
TEST(CacheWeightCasts, WeightsReadThroughViewsAreCachedToo) {
  auto m = parseModule(R"(func @forward {
  %x = input() {name = "x"} : f32[4,8]
  %w1 = param() {name = "fc.weight"} : f32[16,8]
  %w2 = param() {name = "proj.weight"} : f32[2,4,8]
  %t1 = permute(%w1) {perm = [1, 0]} : f32[8,16]
  %h = matmul(%x, %t1) : f32[4,16]
  %r2 = reshape(%w2) : f32[8,8]
  %t2 = permute(%r2) {perm = [1, 0]} : f32[8,8]
  %a = slice(%h) {axis = 1, start = 0, end = 8} : f32[4,8]
  %y = matmul(%a, %t2) : f32[4,8]
  %l = sum(%y) {axes = [0, 1]} : f32[]
  return %l
})");
  for (auto& p : programPasses("train_step", DType::bf16, fe::AdamWConfig{})) {
    if (p->name() == "cache-weight-casts") break;
    p->run(*m);
  }
  auto copies = checkCachedCastsKeepResults(*m);
  EXPECT_EQ(copies, (std::vector<std::string>{"fc.weight.bf16", "proj.weight.bf16"}));
}

TEST(ToyModel, Bf16TrainStepCloseToF32) {
  auto build = [](DType d) {
    auto m = std::make_unique<Module>();
    models::buildToyTrainLoss(*m, models::ToyConfig{}, 4);
    std::vector<std::string> passes = programPassNames("train_step", d);
    passes.erase(std::find(passes.begin(), passes.end(), "adamw"), passes.end());  // loss and grads
    runPasses(*m, passes);
    return m;
  };
  auto f32 = build(DType::f32), bf16 = build(DType::bf16);
  Bindings env = randomBindings(*f32->funcs[0], 5, 3);
  auto want = interpret(*f32->funcs[0], env), got = interpret(*bf16->funcs[0], env);
  ASSERT_EQ(want.size(), 5u);  // loss, fc1, ln.weight, ln.bias, fc2 gradients
  for (size_t i = 0; i < want.size(); ++i) EXPECT_LT(test::normRelError(got[i], want[i]), 2e-2) << "output " << i;
}

}  // namespace
}  // namespace fusec
