// The whole compile pipeline keeps meaning: the tiny transformer's `forward` and three
// `train_step`s, interpreted before (the traced program) and after every optimisation pass
// (decompose .. memory-plan), agree within 1e-6 in f32; the bf16 programs agree with their
// own unoptimised form tightly and with f32 within bf16 tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "frontend/init.h"
#include "frontend/models/transformer.h"
#include "ir/interpreter.h"
#include "ir/roles.h"
#include "ir/verifier.h"
#include "passes/fusion/kernel_family.h"
#include "passes/launch_stats.h"
#include "passes/memory_plan.h"
#include "passes/pass_manager.h"
#include "api/compile.h"
#include "passes/pipeline.h"
#include "support/ptr_hash.h"
#include "test_util.h"

namespace fusec {
namespace {

constexpr int64_t kBatch = 2, kSeq = 8;

models::ModelConfig tiny() { return models::namedConfig("tiny"); }

// The program as `fusec compile` builds it: the trace, its program passes, then (when
// `optimise`) the default optimisation pipeline, verified after every pass.
std::unique_ptr<Module> buildProgram(const std::string& program, DType dtype, bool optimise,
                                     const models::ModelConfig& cfg = tiny(), int64_t batch = kBatch,
                                     int64_t seq = kSeq) {
  auto m = std::make_unique<Module>();
  if (program == "forward")
    models::buildForward(*m, cfg, batch, seq);
  else
    models::buildTrainLoss(*m, cfg, batch, seq);
  api::lowerProgram(*m, program, {.dtype = dtype, .passes = optimise ? std::nullopt : std::optional<std::string>("")});
  verify(*m);
  return m;
}

// The traced f32 program with composites and no pass at all (the "before").
std::unique_ptr<Module> tracedProgram(const std::string& program) {
  auto m = std::make_unique<Module>();
  if (program == "forward")
    models::buildForward(*m, tiny(), kBatch, kSeq);
  else
    models::buildTrainStep(*m, tiny(), kBatch, kSeq, fe::AdamWConfig{});
  return m;
}

// Weights from the model's own initialisation, non-zero AdamW state, random token ids, and
// each cached bf16 weight copy equal to bf16 of its weight.
Bindings bindingsFor(const Graph& g, uint32_t seed) {
  std::mt19937 rng(seed);
  Bindings env;
  for (auto& [name, t] : initParameters(tiny(), seed)) env[name] = t;
  std::uniform_real_distribution<double> mag(0.5, 2.0);
  for (Op* p : g.params()) {
    const std::string& name = p->attrStr("name");
    const Type& t = p->result()->type;
    const Role role = roleOf(*p);
    if (role == Role::WeightCopy) {
      const HostTensor& w = env.at(ownerOf(*p));
      HostTensor c = HostTensor::zeros(t);
      for (size_t k = 0; k < c.size(); ++k) c.set(k, w.f[k]);
      env[name] = c;
    } else if (role == Role::ExpAvg || role == Role::ExpAvgSq) {
      const bool sq = role == Role::ExpAvgSq;
      HostTensor h = HostTensor::zeros(t);
      for (size_t k = 0; k < h.size(); ++k) h.set(k, (sq ? 1e-4 : ((rng() & 1) ? 1e-2 : -1e-2)) * mag(rng));
      env[name] = h;
    }
  }
  for (Op* in : g.inputs()) {
    const std::string& name = in->attrStr("name");
    HostTensor h = HostTensor::zeros(in->result()->type);
    if (name == "step") continue;
    std::uniform_int_distribution<int64_t> id(0, tiny().vocab - 1);
    for (auto& v : h.i) v = id(rng);
    env[name] = h;
  }
  return env;
}

// Runs `steps` training steps (or one forward), feeding every in-place update output back
// into the param it updates; returns every step's outputs.
std::vector<std::vector<HostTensor>> runSteps(const Graph& g, Bindings env, int steps) {
  std::vector<std::vector<HostTensor>> all;
  for (int s = 0; s < steps; ++s) {
    if (g.findInput("step")) {
      env["step"] = HostTensor::zeros(Type{DType::f32, {}});
      env["step"].set(0, double(s + 1));
    }
    all.push_back(interpret(g, env));
    for (size_t i = 0; i < g.outputs.size(); ++i)
      if (!g.updateOf(i).empty()) env[g.updateOf(i)] = all.back()[i];
  }
  return all;
}

// Worst norm-wise relative error over all outputs of all steps.
double worstError(const std::vector<std::vector<HostTensor>>& got, const std::vector<std::vector<HostTensor>>& want) {
  double worst = 0;
  EXPECT_EQ(got.size(), want.size());
  for (size_t s = 0; s < got.size(); ++s) {
    EXPECT_EQ(got[s].size(), want[s].size());
    for (size_t i = 0; i < std::min(got[s].size(), want[s].size()); ++i) {
      EXPECT_EQ(got[s][i].type, want[s][i].type) << "step " << s << " output " << i;
      worst = std::max(worst, test::normRelError(got[s][i], want[s][i]));
    }
  }
  return worst;
}

// The weight updates (new W - W) of one step, compared norm-wise: stricter than comparing
// the new weights, which are dominated by the unchanged part.
double worstUpdateError(const Graph& g, const Bindings& env, const std::vector<HostTensor>& got,
                        const std::vector<HostTensor>& want) {
  double worst = 0;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const std::string& w = g.updateOf(i);
    if (w.empty() || roleOf(*g.findParam(w)) != Role::Weight) continue;
    const HostTensor& old = env.at(w);
    HostTensor dg = got[i], dw = want[i];
    for (size_t k = 0; k < dg.size(); ++k) {
      dg.f[k] -= old.f[k];
      dw.f[k] -= old.f[k];
    }
    worst = std::max(worst, test::normRelError(dg, dw));
  }
  return worst;
}

TEST(Pipeline, TinyForwardKeepsMeaningF32) {
  auto before = tracedProgram("forward");
  auto after = buildProgram("forward", DType::f32, true);
  Bindings env = bindingsFor(*after->funcs[0], 11);
  double err = worstError(runSteps(*after->funcs[0], env, 1), runSteps(*before->funcs[0], env, 1));
  EXPECT_LT(err, 1e-6);
  std::printf("tiny forward, f32: worst relative error %.3g\n", err);
}

TEST(Pipeline, TinyTrainStepKeepsMeaningF32) {
  auto before = tracedProgram("train_step");
  auto after = buildProgram("train_step", DType::f32, true);
  const Graph& g = *after->funcs[0];
  // The optimised program is really optimised: GEMMs and kernels only.
  LaunchStats ls = launchStats(g);
  EXPECT_GT(ls.kernels, 0);
  for (auto& op : g.ops)
    EXPECT_TRUE(op->kind == OpKind::Matmul || op->kind == OpKind::Kernel || op->info().category == OpCategory::Source ||
                op->info().category == OpCategory::Layout || op->kind == OpKind::Concat)
        << op->info().name;
  Bindings env = bindingsFor(g, 12);
  auto want = runSteps(*before->funcs[0], env, 3), got = runSteps(g, env, 3);
  double err = worstError(got, want);
  double upd = worstUpdateError(g, env, got[0], want[0]);
  EXPECT_LT(err, 1e-6);
  EXPECT_LT(upd, 1e-5);
  std::printf("tiny train_step x3, f32: worst relative error %.3g (first-step weight updates %.3g)\n", err, upd);
}

TEST(Pipeline, TinyBf16KeepsMeaning) {
  for (const char* program : {"forward", "train_step"}) {
    auto unopt = buildProgram(program, DType::bf16, false);
    auto opt = buildProgram(program, DType::bf16, true);
    auto f32 = tracedProgram(program);
    Bindings env = bindingsFor(*opt->funcs[0], 13);
    const int steps = std::string(program) == "forward" ? 1 : 3;
    auto got = runSteps(*opt->funcs[0], env, steps);
    // The same bf16 program before optimisation: fusion keeps every rounding point, so only
    // merged GEMM sums differ (they accumulate in one pass instead of two roundings).
    double self = worstError(got, runSteps(*unopt->funcs[0], env, steps));
    EXPECT_LT(self, 1e-2) << program;
    // Against f32: the loss and the f32 outputs within bf16 tolerance.
    auto ref = runSteps(*f32->funcs[0], env, steps);
    double vsF32 = 0;
    for (size_t s = 0; s < ref.size(); ++s)
      for (size_t i = 0; i < ref[s].size(); ++i) vsF32 = std::max(vsF32, test::normRelError(got[s][i], ref[s][i]));
    EXPECT_LT(vsF32, 2e-2) << program;
    std::printf("tiny %s, bf16: vs unoptimised bf16 %.3g, vs f32 %.3g\n", program, self, vsF32);
  }
}

// The issue-4 budget on the real size: medium train_step at batch 4, ctx 256, fp32 and bf16:
// at most 11 launches per layer forward and 22 backward (that layer's AdamW included), a
// memory plan within 5% of the live lower bound, and an arena (activations and gradients)
// far below parameters + gradients + AdamW state, because one layer's gradients die with
// its AdamW kernel.
TEST(Pipeline, MediumTrainStepLaunchAndMemoryBudget) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    const models::ModelConfig cfg = models::namedConfig("medium");
    auto m = buildProgram("train_step", dtype, true, cfg, 4, 256);
    const Graph& g = *m->funcs[0];
    LaunchStats ls = launchStats(g);
    EXPECT_LE(ls.launchesPerLayer.forward, 11) << dtypeName(dtype);
    EXPECT_LE(ls.launchesPerLayer.backward, 22) << dtypeName(dtype);
    EXPECT_EQ(ls.gemms, 24 * (6 + 12) + 3) << dtypeName(dtype);
    MemoryPlanStats mem = planMemoryStats(g);
    EXPECT_LE(double(mem.plannedBytes), 1.05 * double(mem.liveLowerBoundBytes)) << dtypeName(dtype);
    const int64_t paramsGradsAdam = 16 * models::parameterCount(cfg);
    EXPECT_LT(mem.plannedBytes, paramsGradsAdam / 2) << dtypeName(dtype);
    std::printf("medium train_step %s: launches/layer fwd %lld bwd %lld, arena %.3f GB (lower bound %.3f), resident %.3f GB\n",
                std::string(dtypeName(dtype)).c_str(), (long long)ls.launchesPerLayer.forward,
                (long long)ls.launchesPerLayer.backward, mem.plannedBytes / 1e9, mem.liveLowerBoundBytes / 1e9,
                mem.residentBytes / 1e9);
  }
}

// No pointwise op is left as a kernel of its own: every pointwise kernel does at least two
// things (a lone op could always have joined its producer or consumer), and no pointwise
// kernel feeds another pointwise kernel of the same size that alone consumes it.
TEST(Pipeline, NoLonePointwiseKernels) {
  models::ModelConfig cfg = models::namedConfig("small");
  cfg.layers = 2;
  for (const char* program : {"forward", "train_step"})
    for (DType dtype : {DType::f32, DType::bf16}) {
      auto m = buildProgram(program, dtype, true, cfg, 2, 32);
      const Graph& g = *m->funcs[0];
      PtrMap<const Value*, std::vector<const Op*>> users;
      for (auto& op : g.ops)
        for (Value* v : op->operands) users[v].push_back(op.get());
      int kernels = 0;
      for (auto& op : g.ops) {
        if (op->kind != OpKind::Kernel) continue;
        ++kernels;
        const KernelFamily fam = classifyKernel(*op->body);
        if (fam != KernelFamily::Pointwise) continue;
        int compute = 0;
        for (auto& b : op->body->ops) {
          const OpCategory c = b->info().category;
          compute += c != OpCategory::Source && c != OpCategory::Layout;
        }
        EXPECT_GE(compute, 2) << op->attrStr("name") << " (" << program << ", " << dtypeName(dtype) << ")";
        for (auto& r : op->results) {
          const auto& us = users[r.get()];
          if (us.size() != 1 || us[0]->kind != OpKind::Kernel) continue;
          const Op* c = us[0];
          if (classifyKernel(*c->body) == KernelFamily::Pointwise && c->result()->type.numel() == r->type.numel())
            ADD_FAILURE() << op->attrStr("name") << " alone feeds " << c->attrStr("name") << " of the same size";
        }
      }
      EXPECT_GT(kernels, 0);
    }
}

// The fuse pass records on every kernel op what its body is (kernel_family.h), and the record
// is what the body is at the end of the pipeline: codegen and the profile read it instead of
// classifying the body again.
TEST(Pipeline, KernelsRecordTheirFamilyAndHint) {
  models::ModelConfig cfg = models::namedConfig("small");
  cfg.layers = 2;
  for (const char* program : {"forward", "train_step"})
    for (DType dtype : {DType::f32, DType::bf16}) {
      auto m = buildProgram(program, dtype, true, cfg, 2, 32);
      std::set<std::string> families;
      for (auto& op : m->funcs[0]->ops) {
        if (op->kind != OpKind::Kernel) continue;
        const std::string& name = op->attrStr("name");
        ASSERT_FALSE(op->attrStr("family").empty()) << name;
        EXPECT_EQ(op->attrStr("family"), familyName(classifyKernel(*op->body))) << name;
        EXPECT_FALSE(op->attrStr("hint").empty()) << name;
        EXPECT_EQ(name.rfind(op->attrStr("family") + "_", 0), 0u) << name;  // the name starts with it
        EXPECT_EQ(name.substr(name.size() - op->attrStr("hint").size()), op->attrStr("hint")) << name;
        families.insert(op->attrStr("family"));
      }
      EXPECT_GE(families.size(), 2u) << program;  // at least pointwise and row_reduce
    }
}

}  // namespace
}  // namespace fusec
