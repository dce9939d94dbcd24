// The compile API (api/compiled_program.h) on the CPU backend: a compiled training step
// stepped through CompiledProgram gives exactly what interpreting its lowered graph by hand
// gives; its state carries from step to step; bad programs and inputs get one-line errors.
#include <gtest/gtest.h>

#include "api/compiled_program.h"
#include "frontend/init.h"
#include "frontend/models/zoo_model.h"
#include "frontend/program_state.h"
#include "ir/interpreter.h"
#include "test_util.h"

namespace fusec {
namespace {

using test::errorOf;

constexpr int64_t B = 2, T = 8;

HostTensor tokens(uint64_t seed, int64_t vocab) {
  HostTensor t = HostTensor::zeros(Type{DType::i64, {B, T}});
  for (size_t k = 0; k < t.i.size(); ++k) t.i[k] = int64_t((seed * 7919 + k * 104729) % uint64_t(vocab));
  return t;
}

TEST(CompileApi, TrainStepMatchesHandInterpretedGraphAndCarriesState) {
  const models::ModelConfig cfg = models::namedConfig("tiny");
  auto model = models::transformerModel(cfg);
  api::CompileOptions o;
  o.adamw.lr = 1e-2;
  api::CompiledProgram p = api::compile(*model, {"train_step", B, T}, o);
  EXPECT_GT(p.stats().launches.kernels, 0);
  EXPECT_GT(p.stats().arenaBytes, 0);

  Bindings env = initParameters(cfg, 3);
  bindProgramState(p.graph(), env);
  p.bind(Bindings(env));
  const Bindings inputs{{"ids", tokens(1, cfg.vocab)}, {"targets", tokens(2, cfg.vocab)}};

  // By hand: the same lowered graph, step = 1 then 2, updates written back.
  const Graph& g = p.graph();
  std::vector<float> want;
  for (int s = 1; s <= 2; ++s) {
    for (auto& [n, t] : inputs) env[n] = t;
    env["step"] = HostTensor::zeros(Type{DType::f32, {}});
    env["step"].f[0] = float(s);
    std::vector<HostTensor> outs = interpret(g, env);
    want.push_back(outs.at(0).f.at(0));
    for (size_t i = 0; i < outs.size(); ++i)
      if (!g.updateOf(i).empty()) env[g.updateOf(i)] = outs[i];
  }
  std::vector<float> got;
  for (int s = 1; s <= 2; ++s) {
    std::vector<HostTensor> outs = p.step(inputs);
    ASSERT_EQ(outs.size(), 1u);  // the loss; the updated params stay put (read())
    got.push_back(outs[0].f.at(0));
  }
  EXPECT_EQ(got, want);
  EXPECT_NE(got[0], got[1]);  // the update happened: the second step sees new weights
  EXPECT_EQ(p.stepsRun(), 2);
  const std::string w = "layers.0.attn.q_proj.weight";
  EXPECT_EQ(p.read(w).f, env.at(w).f);
}

TEST(CompileApi, ForwardOfEveryBuiltInModelKind) {
  // The toy model and the attention programs go through the same entry point.
  auto toy = models::modelByName("toy");
  api::CompiledProgram f = api::compile(*toy, {"forward", 3, 1});
  f.bind(toy->initialWeights(5));
  HostTensor x = HostTensor::zeros(Type{DType::f32, {3, 20}});
  for (size_t k = 0; k < x.f.size(); ++k) x.f[k] = float(k % 7) - 3.f;
  EXPECT_EQ(f.step({{"x", x}}).at(0).type, (Type{DType::f32, {3, 5}}));

  auto attention = models::attentionModel(8);
  api::CompiledProgram a = api::compile(*attention, {"attention", 1, 4});
  HostTensor q = HostTensor::zeros(Type{DType::f32, {1, 4, 8}});
  for (size_t k = 0; k < q.f.size(); ++k) q.f[k] = 0.1f * float(k % 5);
  EXPECT_EQ(a.step({{"q", q}, {"k", q}, {"v", q}}).at(0).type, q.type);
}

TEST(CompileApi, ErrorsAreOneLine) {
  const models::ModelConfig cfg = models::namedConfig("tiny");
  auto model = models::transformerModel(cfg);
  EXPECT_EQ(errorOf([&] { api::compile(*model, {"attention", B, T}); }),
            "model 'tiny' has no program 'attention' (it has: forward, train_step, fwd_bwd)");
  EXPECT_EQ(errorOf([&] { api::compile(*model, {"forward", 0, T}); }),
            "batch and sequence length must be at least 1, got 0 and 8");
  EXPECT_EQ(errorOf([&] { api::compile(*model, {"forward", B, 17}); }),
            "sequence length 17 exceeds the context length 16 of model 'tiny'");
  EXPECT_EQ(errorOf([&] { models::modelByName("huge"); }).rfind("unknown model 'huge' (known: ", 0), 0u);

  api::CompiledProgram p = api::compile(*model, {"forward", B, T});
  p.bind(initParameters(cfg, 1));
  HostTensor ids = tokens(1, cfg.vocab);
  EXPECT_EQ(errorOf([&] { p.step({}); }), "missing tensor 'ids' (expected i64[2,8])");
  EXPECT_EQ(errorOf([&] { p.step({{"ids", HostTensor::zeros(Type{DType::i64, {B, T + 1}})}}); }),
            "tensor 'ids' is i64[2,9], expected i64[2,8]");
  ids.i[5] = cfg.vocab;
  EXPECT_EQ(errorOf([&] { p.step({{"ids", ids}}); }),
            "token id " + std::to_string(cfg.vocab) + " at ids[0,5] is out of range for vocab " + std::to_string(cfg.vocab));
  ids.i[5] = 0;
  EXPECT_NO_THROW(p.step({{"ids", ids}}));
}

// What `fusec run` asks of any model: the program's shape from its inputs, its own initial
// weights, and a description for reports; no command knows which model it runs.
TEST(ModelInterface, ShapesInitialWeightsAndConfigComeFromTheModel) {
  const models::ModelConfig cfg = models::namedConfig("tiny");
  auto lm = models::transformerModel(cfg);
  const Bindings ids{{"ids", HostTensor::zeros(Type{DType::i64, {3, 5}})}};
  const api::Program p = lm->programFor("train_step", ids);
  EXPECT_EQ(p.name, "train_step");
  EXPECT_EQ(p.batch, 3);
  EXPECT_EQ(p.seq, 5);
  EXPECT_EQ(errorOf([&] { lm->programFor("forward", {}); }), "missing tensor 'ids' (expected i64[B,T])");
  EXPECT_EQ(errorOf([&] { lm->programFor("forward", {{"ids", HostTensor::zeros(Type{DType::i32, {3, 5}})}}); }),
            "tensor 'ids' is i32[3,5], expected i64[B,T]");
  EXPECT_EQ(errorOf([&] { lm->programFor("forward", {{"ids", HostTensor::zeros(Type{DType::i64, {1, 17}})}}); }),
            "tensor 'ids' has sequence length 17, more than the model's context 16");
  EXPECT_EQ(errorOf([&] { lm->programFor("forward", {{"ids", HostTensor::zeros(Type{DType::i64, {0, 4}})}}); }),
            "tensor 'ids' is i64[0,4]: every dimension must be at least 1");
  EXPECT_EQ(lm->contextLength(), 16);

  auto toy = models::modelByName("toy");
  const api::Program tp = toy->programFor("forward", {{"x", HostTensor::zeros(Type{DType::f32, {6, 20}})}});
  EXPECT_EQ(tp.batch, 6);
  EXPECT_EQ(errorOf([&] { toy->programFor("forward", {{"x", HostTensor::zeros(Type{DType::f32, {6, 21}})}}); }),
            "tensor 'x' is f32[6,21], expected f32[B,20]");
  EXPECT_EQ(toy->contextLength(), 0);

  auto attention = models::attentionModel(8);
  const api::Program ap = attention->programFor("attention", {{"q", HostTensor::zeros(Type{DType::f32, {2, 7, 8}})}});
  EXPECT_EQ(ap.batch, 2);
  EXPECT_EQ(ap.seq, 7);

  for (const api::Model* m : {lm.get(), toy.get()}) {
    const Bindings w = m->initialWeights(11);
    ASSERT_EQ(w.size(), m->params().size()) << m->name();
    for (const api::ParamInfo& info : m->params()) {
      ASSERT_TRUE(w.count(info.name)) << info.name;
      EXPECT_EQ(w.at(info.name).type, (Type{DType::f32, info.shape})) << info.name;
    }
    // Deterministic in the seed, and the seed matters.
    const std::string first = m->params().front().name;
    EXPECT_EQ(m->initialWeights(11).at(first).f, w.at(first).f);
    EXPECT_NE(m->initialWeights(12).at(first).f, w.at(first).f);
  }
  EXPECT_EQ(lm->initialWeights(11).at("token_embeddings.weight").f, initParameters(cfg, 11).at("token_embeddings.weight").f);

  // Example inputs are valid inputs, deterministic in the seed.
  for (const api::Model* m : {lm.get(), toy.get(), attention.get()})
    for (const std::string& program : m->programs()) {
      const api::Program shape{program, 2, m == toy.get() ? 1 : 6};
      const Bindings in = m->exampleInputs(shape, 4);
      EXPECT_NO_THROW(m->validateInputs(shape, in)) << m->name() << " " << program;
      EXPECT_EQ(m->programFor(program, in).batch, 2) << m->name() << " " << program;
      const Bindings again = m->exampleInputs(shape, 4);
      for (const auto& [name, t] : in) {
        EXPECT_EQ(again.at(name).f, t.f) << name;
        EXPECT_EQ(again.at(name).i, t.i) << name;
      }
    }

  const auto c = lm->config();
  ASSERT_GE(c.size(), 6u);
  EXPECT_EQ(c[0], (std::pair<std::string, double>{"vocab", double(cfg.vocab)}));
  EXPECT_EQ(c[2], (std::pair<std::string, double>{"d_model", double(cfg.dModel)}));
}

}  // namespace
}  // namespace fusec
