// Roles as IR metadata (ir/roles.h): the attributes' spelling, who sets them (the frontend,
// adamw, cache-weight-casts), and that nothing reads roles out of names: medium's bf16
// training step with every parameter renamed compiles to the same kernels, launches per
// layer and memory plan.
#include <gtest/gtest.h>

#include "api/compile.h"
#include "frontend/models/transformer.h"
#include "frontend/models/zoo_model.h"
#include "ir/roles.h"
#include "passes/launch_stats.h"
#include "passes/memory_plan.h"
#include "test_util.h"

namespace fusec {
namespace {

TEST(Roles, NamesParseAndFitTheirOps) {
  for (Role r : {Role::Data, Role::TokenIds, Role::Targets, Role::StepCount, Role::Weight, Role::ExpAvg, Role::ExpAvgSq,
                 Role::WeightCopy})
    EXPECT_EQ(parseRole(roleName(r)), r) << roleName(r);
  EXPECT_EQ(parseRole("moment"), std::nullopt);
  EXPECT_TRUE(roleFits(Role::Weight, OpKind::Param));
  EXPECT_FALSE(roleFits(Role::Weight, OpKind::Input));
  EXPECT_TRUE(roleFits(Role::StepCount, OpKind::Input));
  EXPECT_FALSE(roleFits(Role::TokenIds, OpKind::Param));
  EXPECT_FALSE(roleFits(Role::Data, OpKind::Add));
}

// The traced model and the train_step program passes leave every source with its role.
TEST(Roles, TrainStepSourcesCarryTheirRoles) {
  auto model = models::transformerModel(models::namedConfig("tiny"));
  Module m;
  api::CompileOptions o;
  o.dtype = DType::bf16;
  o.passes = "";
  model->trace(m, {"train_step", 2, 8}, o);
  api::lowerProgram(m, "train_step", o);
  const Graph& g = *m.funcs.at(0);
  ASSERT_NE(findInputByRole(g, Role::TokenIds), nullptr);
  EXPECT_EQ(findInputByRole(g, Role::TokenIds)->attrStr("name"), "ids");
  EXPECT_EQ(findInputByRole(g, Role::Targets)->attrStr("name"), "targets");
  EXPECT_EQ(findInputByRole(g, Role::StepCount)->attrStr("name"), "step");
  const Op* w = g.findParam("layers.1.ffn.w2.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(roleOf(*w), Role::Weight);
  EXPECT_EQ(ownerName(*w), "layers.1.ffn.w2.weight");
  EXPECT_EQ(layerOf(*w), 1);
  for (const char* state : {"layers.1.ffn.w2.weight.exp_avg", "layers.1.ffn.w2.weight.exp_avg_sq", "layers.1.ffn.w2.weight.bf16"}) {
    const Op* p = g.findParam(state);
    ASSERT_NE(p, nullptr) << state;
    EXPECT_EQ(ownerOf(*p), "layers.1.ffn.w2.weight") << state;
    EXPECT_EQ(layerOf(*p), 1) << state;
    EXPECT_EQ(ownerWeight(g, *p), w) << state;
    EXPECT_EQ(ownerName(*p), "layers.1.ffn.w2.weight") << state;
  }
  EXPECT_EQ(roleOf(*g.findParam("layers.1.ffn.w2.weight.exp_avg_sq")), Role::ExpAvgSq);
  EXPECT_EQ(roleOf(*g.findParam("layers.1.ffn.w2.weight.bf16")), Role::WeightCopy);
  EXPECT_EQ(layerOf(*g.findParam("lm_head.weight")), -1);
  EXPECT_EQ(layerOf(*g.findParam("lm_head.weight.exp_avg")), -1);
}

struct Lowered {
  LaunchStats launches;
  MemoryPlanStats memory;
  std::vector<std::string> ops;  // top-level op kinds, kernels by name
};

Lowered lower(Module& m) {
  api::CompileOptions o;
  o.dtype = DType::bf16;
  o.attention = AttentionLowering::Fused;
  api::lowerProgram(m, "train_step", o);
  Lowered l{launchStats(m), planMemoryStats(*m.funcs.at(0)), {}};
  for (auto& op : m.funcs.at(0)->ops)
    l.ops.push_back(op->kind == OpKind::Kernel ? op->attrStr("name") : std::string(op->info().name));
  return l;
}

TEST(Roles, RenamedParametersCompileTheSame) {
  auto model = models::transformerModel(models::namedConfig("medium"));
  api::CompileOptions traceOpts;
  traceOpts.dtype = DType::bf16;
  Module original, renamed;
  model->trace(original, {"train_step", 2, 32}, traceOpts);
  model->trace(renamed, {"train_step", 2, 32}, traceOpts);
  // Names that say nothing: no "layers.", no suffixes, the embedding not called one.
  int k = 0;
  for (Op* p : renamed.funcs.at(0)->params()) {
    const std::string name = "w" + std::to_string(k++);
    p->setAttr("name", name);
    p->result()->name = name;
  }
  ASSERT_EQ(renamed.funcs.at(0)->findParam("token_embeddings.weight"), nullptr);

  const Lowered a = lower(original), b = lower(renamed);
  EXPECT_EQ(a.ops, b.ops);  // the same kernels (multi-tensor AdamW per layer included), in order
  EXPECT_EQ(a.launches.gemms, b.launches.gemms);
  EXPECT_EQ(a.launches.kernels, b.launches.kernels);
  EXPECT_EQ(a.launches.forwardPerLayer, b.launches.forwardPerLayer);
  EXPECT_EQ(a.launches.backwardPerLayer, b.launches.backwardPerLayer);
  EXPECT_EQ(a.launches.outside.forward, b.launches.outside.forward);
  EXPECT_EQ(a.launches.outside.backward, b.launches.outside.backward);
  EXPECT_EQ(a.memory.plannedBytes, b.memory.plannedBytes);
  EXPECT_EQ(a.memory.residentBytes, b.memory.residentBytes);
  // And the statistics are the real ones: 24 blocks, each with its launches.
  ASSERT_EQ(b.launches.forwardPerLayer.size(), 24u);
  EXPECT_GT(b.launches.launchesPerLayer.forward, 0);
  EXPECT_GT(b.launches.launchesPerLayer.backward, 0);
  int adamw = 0;
  for (const std::string& op : b.ops) adamw += op.find("multi_tensor_") == 0;
  EXPECT_EQ(adamw, 24);  // one multi-tensor AdamW kernel per block
}

}  // namespace
}  // namespace fusec
