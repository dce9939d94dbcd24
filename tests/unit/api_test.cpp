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
  for (int s = 1; s <= 2; ++s) got.push_back(p.step(inputs).at(0).f.at(0));
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
  Bindings w;
  for (const auto& spec : models::toyParameterSpecs({})) w.emplace(spec.name, initParameter(spec, 5));
  f.bind(std::move(w));
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
  EXPECT_EQ(errorOf([&] { p.step({}); }), "missing input 'ids' (expected i64[2,8])");
  EXPECT_EQ(errorOf([&] { p.step({{"ids", HostTensor::zeros(Type{DType::i64, {B, T + 1}})}}); }),
            "input 'ids' is i64[2,9], expected i64[2,8]");
  ids.i[5] = cfg.vocab;
  EXPECT_EQ(errorOf([&] { p.step({{"ids", ids}}); }),
            "token id " + std::to_string(cfg.vocab) + " at ids[0,5] is out of range for vocab " + std::to_string(cfg.vocab));
  ids.i[5] = 0;
  EXPECT_NO_THROW(p.step({{"ids", ids}}));
}

}  // namespace
}  // namespace fusec
