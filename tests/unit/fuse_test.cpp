// Tests of the fuse pass: interpreter semantics before vs after on random non-zero inputs,
// the top-level contract of docs/pipeline.md ("After fuse"), kernel families, and that a
// second run changes nothing. The .fir structure checks live in tests/lit/passes/fuse.fir.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "api/compile.h"
#include "frontend/models/transformer.h"
#include "ir/interpreter.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/strided_view.h"
#include "ir/verifier.h"
#include "passes/fusion/kernel_family.h"
#include "passes/fusion/plan.h"
#include "passes/pass.h"
#include "passes/pass_manager.h"
#include "passes/pipeline.h"
#include "support/ptr_hash.h"

namespace fusec {
namespace {

// Non-zero values; integer inputs are small non-negative indices (token ids, targets).
Bindings randomBindings(const Graph& g, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> mag(0.5, 2.0);
  std::uniform_int_distribution<int> coin(0, 1), index(0, 4);
  Bindings env;
  for (auto& op : g.ops) {
    if (op->kind != OpKind::Input && op->kind != OpKind::Param) continue;
    HostTensor h = HostTensor::zeros(op->result()->type);
    for (size_t k = 0; k < h.size(); ++k)
      h.set(k, isFloat(h.type.dtype) ? (coin(rng) ? 1 : -1) * mag(rng) : double(index(rng)));
    env[op->attrStr("name")] = h;
  }
  return env;
}

::testing::AssertionResult close(const HostTensor& a, const HostTensor& b, double rel) {
  if (a.type != b.type) return ::testing::AssertionFailure() << a.type.str() << " vs " << b.type.str();
  for (size_t k = 0; k < a.size(); ++k) {
    double x = a.get(k), y = b.get(k);
    if (x == y || (std::isnan(x) && std::isnan(y)) || std::fabs(x - y) <= rel * std::max(std::fabs(x), std::fabs(y)))
      continue;
    return ::testing::AssertionFailure() << "element " << k << ": " << x << " vs " << y;
  }
  return ::testing::AssertionSuccess();
}

// docs/pipeline.md "After fuse: the top level".
::testing::AssertionResult checkTopLevel(const Graph& g) {
  PtrMap<const Value*, std::vector<const Op*>> users;
  for (auto& op : g.ops)
    for (Value* v : op->operands) users[v].push_back(op.get());
  PtrSet<const Value*> outputs(g.outputs.begin(), g.outputs.end());
  for (auto& op : g.ops) {
    const std::string what = "@" + g.name + ": " + std::string(op->info().name) + " %" + op->result()->name;
    switch (op->kind) {
      case OpKind::Input:
      case OpKind::Param:
      case OpKind::Matmul:
      case OpKind::Constant:
      case OpKind::Iota: continue;
      case OpKind::Kernel:
        try {
          classifyKernel(*op->body);
        } catch (const Error& e) {
          return ::testing::AssertionFailure() << what << ": " << e.what();
        }
        continue;
      case OpKind::Concat:
        for (Value* v : op->operands)
          if (v->def->kind != OpKind::Param || op->attrInt("axis") != 0)
            return ::testing::AssertionFailure() << what << " is not a resident concat";
        continue;
      default: break;
    }
    if (!isViewOp(op->kind)) return ::testing::AssertionFailure() << what << " left at top level";
    Value* v = op->result();
    auto view = resolveView(v);
    if (!view) return ::testing::AssertionFailure() << what << " is not a view";
    for (const Op* u : users[v]) {
      const bool ok = isViewOp(u->kind) || (u->kind == OpKind::Matmul && gemmReadable(*view, v->type.shape));
      if (!ok) return ::testing::AssertionFailure() << what << " is read by " << u->info().name;
    }
    if (outputs.count(v) && !isContiguousView(*view, v->type.shape))
      return ::testing::AssertionFailure() << what << " is a non-contiguous output";
  }
  return ::testing::AssertionSuccess();
}

// Runs fuse on `m` and checks everything the pass promises.
void fuseChecked(Module& m, double rel = 1e-6) {
  verify(m);
  auto before = cloneModule(m);
  auto fuse = createPass("fuse");
  fuse->run(m);
  ASSERT_NO_THROW(verify(m)) << printModule(m);
  for (size_t f = 0; f < m.funcs.size(); ++f) {
    EXPECT_TRUE(checkTopLevel(*m.funcs[f])) << printModule(m);
    Bindings env = randomBindings(*before->funcs[f], 7 + uint32_t(f));
    auto want = interpret(*before->funcs[f], env);
    auto got = interpret(*m.funcs[f], env);
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(close(want[i], got[i], rel)) << "@" << m.funcs[f]->name << " output " << i;
  }
  std::string once = printModule(m);
  EXPECT_FALSE(fuse->run(m)) << "second run changed the module";
  EXPECT_EQ(printModule(m), once);
}

int kernels(const Graph& g, KernelFamily fam) {
  int n = 0;
  for (auto& op : g.ops) n += op->kind == OpKind::Kernel && classifyKernel(*op->body) == fam;
  return n;
}

TEST(PassFuse, LitGraphsKeepTheirMeaning) {
  auto m = parseFile(std::string(FUSEC_SOURCE_DIR) + "/tests/lit/passes/fuse.fir");
  fuseChecked(*m, 0);
}

// A top-level view that a kernel also recomputes is cloned from its original operands
// (an imported model's training step, lit passes/fuse-recomputed-view.fir).
TEST(PassFuse, RecomputedTopLevelViewKeepsItsOperands) {
  auto m = parseFile(std::string(FUSEC_SOURCE_DIR) + "/tests/lit/passes/fuse-recomputed-view.fir");
  fuseChecked(*m, 1e-5);
}

// Cross-entropy forward (two row reductions and a gather in one row kernel), its loss mean
// (a reduce_all), a norm-weight gradient (col_reduce) and an embedding gradient (scatter).
constexpr const char* kReductions = R"(
func @cross_entropy {
  %z = input() {name = "z"} : f32[6,5]
  %t = input() {name = "t"} : i64[6,1]
  %mx = reduce_max(%z) {axes = [1], keepdim = true} : f32[6,1]
  %mb = broadcast(%mx) : f32[6,5]
  %d = sub(%z, %mb) : f32[6,5]
  %e = exp(%d) : f32[6,5]
  %s = sum(%e) {axes = [1], keepdim = true} : f32[6,1]
  %ls = log(%s) : f32[6,1]
  %lse = add(%ls, %mx) : f32[6,1]
  %zt = gather(%z, %t) {axis = 1} : f32[6,1]
  %l = sub(%lse, %zt) : f32[6,1]
  %loss = mean(%l) {axes = [0, 1]} : f32[]
  return %loss
}

func @total {
  %x = input() {name = "x"} : f32[6,5]
  %s = sum(%x) {axes = [0, 1]} : f32[]
  return %s
}

func @in_place_total {
  %z = input() {name = "z"} : f32[4,6,5]
  %w = input() {name = "w"} : f32[4,6]
  %e = exp(%z) : f32[4,6,5]
  %s = sum(%e) {axes = [2]} : f32[4,6]
  %l = log(%s) : f32[4,6]
  %r = reshape(%l) : f32[24]
  %rw = reshape(%w) : f32[24]
  %m = mul(%r, %rw) : f32[24]
  %t = sum(%m) {axes = [0]} : f32[]
  return %t
}

func @permuted_total {
  %z = input() {name = "z"} : f32[4,6,5]
  %w = input() {name = "w"} : f32[6,4]
  %e = exp(%z) : f32[4,6,5]
  %s = sum(%e) {axes = [2]} : f32[4,6]
  %l = log(%s) : f32[4,6]
  %p = permute(%l) {perm = [1, 0]} : f32[6,4]
  %m = mul(%p, %w) : f32[6,4]
  %t = sum(%m) {axes = [0, 1]} : f32[]
  return %t
}

func @norm_grad {
  %g = input() {name = "g"} : f32[2,3,8]
  %x = input() {name = "x"} : f32[2,3,8]
  %p = mul(%g, %x) : f32[2,3,8]
  %dw = sum(%p) {axes = [0, 1]} : f32[8]
  return %dw
}

func @embedding_grad {
  %g = input() {name = "g"} : f32[6,8]
  %h = input() {name = "h"} : f32[6,8]
  %ids = input() {name = "ids"} : i64[6,8]
  %src = mul(%g, %h) : f32[6,8]
  %zero = constant() {value = 0} : f32[5,8]
  %dE = scatter_add(%zero, %ids, %src) {axis = 0} : f32[5,8]
  return %dE
}
)";

TEST(PassFuse, ReductionFamilies) {
  auto m = parseModule(kReductions);
  fuseChecked(*m, 0);
  // The loss (the mean of the per-row losses) is a total of the row kernel (rowTotals).
  EXPECT_EQ(kernels(*m->find("cross_entropy"), KernelFamily::RowReduce), 1) << printModule(*m);
  EXPECT_EQ(kernels(*m->find("cross_entropy"), KernelFamily::ReduceAll), 0) << printModule(*m);
  EXPECT_EQ(kernels(*m->find("total"), KernelFamily::ReduceAll), 1) << printModule(*m);
  // A row kernel evaluates its row values at each row's own position with that row's
  // reductions in registers: through reshapes the total joins it, through a permute it
  // (and the permuted values) stay out.
  EXPECT_EQ(kernels(*m->find("in_place_total"), KernelFamily::RowReduce), 1) << printModule(*m);
  EXPECT_EQ(kernels(*m->find("in_place_total"), KernelFamily::ReduceAll), 0) << printModule(*m);
  EXPECT_EQ(kernels(*m->find("permuted_total"), KernelFamily::RowReduce), 1) << printModule(*m);
  EXPECT_EQ(kernels(*m->find("permuted_total"), KernelFamily::ReduceAll), 1) << printModule(*m);
  EXPECT_EQ(kernels(*m->find("norm_grad"), KernelFamily::ColReduce), 1) << printModule(*m);
  EXPECT_EQ(kernels(*m->find("embedding_grad"), KernelFamily::Scatter), 1) << printModule(*m);
  for (auto& f : m->funcs)
    EXPECT_EQ(int(f->ops.size() - f->inputs().size()), f->name == "permuted_total" ? 2 : 1) << f->name;
}

// A costly op (ops.def FIR_COSTLY) read through a broadcast into a value 8 times its size or
// more is a table kernel of its own (RoPE's cos of position x frequency); the same op at the
// size it is read at stays inside its consumer's kernel.
TEST(PassFuse, CostlyBroadcastTablesAreMaterialised) {
  auto m = parseModule(R"(
func @table {
  %x = input() {name = "x"} : f32[64,8]
  %w = input() {name = "w"} : f32[8]
  %c = cos(%w) : f32[8]
  %b = broadcast(%c) : f32[64,8]
  %y = mul(%x, %b) : f32[64,8]
  return %y
}
func @same_size {
  %x = input() {name = "x"} : f32[64,8]
  %c = cos(%x) : f32[64,8]
  %y = mul(%x, %c) : f32[64,8]
  return %y
}
func @cheap {
  %x = input() {name = "x"} : f32[64,8]
  %w = input() {name = "w"} : f32[8]
  %c = neg(%w) : f32[8]
  %b = broadcast(%c) : f32[64,8]
  %y = mul(%x, %b) : f32[64,8]
  return %y
})");
  fuseChecked(*m, 0);
  EXPECT_EQ(kernels(*m->find("table"), KernelFamily::Pointwise), 2) << printModule(*m);
  EXPECT_EQ(kernels(*m->find("same_size"), KernelFamily::Pointwise), 1) << printModule(*m);
  EXPECT_EQ(kernels(*m->find("cheap"), KernelFamily::Pointwise), 1) << printModule(*m);
  for (const OpInfo& info : allOps()) {
    if (info.costly) {
      EXPECT_EQ(info.category, OpCategory::Pointwise) << info.name;
    }
  }
  EXPECT_TRUE(opInfo(OpKind::Rsqrt).costly);
  EXPECT_FALSE(opInfo(OpKind::Mul).costly);
}

TEST(PassFuse, CompositesAreRejected) {
  auto m = parseModule(R"(
func @f {
  %x = input() {name = "x"} : f32[2,4]
  %y = softmax(%x) : f32[2,4]
  return %y
})");
  std::string msg;
  try {
    createPass("fuse")->run(*m);
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_EQ(msg, "fuse: softmax is a composite op; run decompose before fuse");
}

// The keys come from the role attributes, whatever the names say.
TEST(PassFuse, UpdateGroupKeys) {
  auto m = parseModule(R"(
func @f {
  %a = param() {name = "layers.7.w", layer = 3} : f32[4]
  %a_m = param() {name = "anything", role = "exp_avg_sq", of = "layers.7.w", layer = 3} : f32[4]
  %b = param() {name = "head"} : f32[4]
  %b_m = param() {name = "head.exp_avg", role = "exp_avg", of = "head"} : f32[4]
  %b_c = param() {name = "copy", role = "bf16_copy", of = "head"} : bf16[4]
  return %a
})");
  verify(*m);
  const Graph& g = *m->funcs[0];
  EXPECT_EQ(fusion::updateGroupKey(*g.findParam("layers.7.w")), "layer 3");
  EXPECT_EQ(fusion::updateGroupKey(*g.findParam("anything")), "layer 3");
  EXPECT_EQ(fusion::updateGroupKey(*g.findParam("head")), "head");
  EXPECT_EQ(fusion::updateGroupKey(*g.findParam("head.exp_avg")), "head");
  EXPECT_EQ(fusion::updateGroupKey(*g.findParam("copy")), "head");
}

// The tiny model through the pipeline up to fuse.
void modelChecked(const std::string& program) {
  Module m;
  auto cfg = models::namedConfig("tiny");
  if (program == "forward") models::buildForward(m, cfg, 2, 8);
  else models::buildTrainStep(m, cfg, 2, 8, models::AdamWConfig{});
  PassManager pm;
  pm.addPipeline("decompose,canonicalize,cse,dce");
  pm.run(m);
  fuseChecked(m, 1e-6);
}

// The norm-weight gradients of a training step are column sums over the batch's rows; each
// joins the rmsnorm backward's row kernel, which reads the same dy and x (fusion/domain.h
// columnSums), instead of split-reductions' two col_reduce launches. Small at batch 16 has
// 4096 rows: enough that split-reductions would split them.
TEST(PassFuse, NormWeightGradientsJoinTheRmsnormBackward) {
  Module m;
  auto cfg = models::namedConfig("small");
  cfg.layers = 2;
  models::buildTrainLoss(m, cfg, 16, 256);
  api::lowerProgram(m, "train_step", {.dtype = DType::bf16});
  const Graph& g = *m.funcs.at(0);
  EXPECT_EQ(kernels(g, KernelFamily::ColReduce), 0);
  int withColumnSums = 0;
  for (auto& op : g.ops) {
    if (op->kind != OpKind::Kernel) continue;
    bool rows = false, cols = false;
    for (auto& b : op->body->ops) {
      if (b->info().category != OpCategory::Reduction) continue;
      rows |= fusion::domainOf(*b).kind == fusion::DomainKind::Row;
      cols |= fusion::domainOf(*b).kind == fusion::DomainKind::Col;
    }
    withColumnSums += rows && cols;
  }
  EXPECT_EQ(withColumnSums, 2 * cfg.layers + 1);  // two norms per layer and the final norm
}

// The forward attention stores O merged for the output projection (the backward reads it
// through the inverse permute): same values, and no copy kernel between them.
TEST(PassFuse, AttentionStoresItsOutputMergedForTheProjection) {
  auto m = parseFile(std::string(FUSEC_SOURCE_DIR) + "/tests/lit/passes/fuse-attention.fir");
  fuseChecked(*m, 1e-5);
  const Graph& g = *m->find("merged");
  EXPECT_EQ(kernels(g, KernelFamily::Attention), 2);
  EXPECT_EQ(kernels(g, KernelFamily::Pointwise), 0) << printModule(*m);
}

// The attention backward's gradients assembled into d(QKV), dq and dk through RoPE's backward
// rotation (ir/attention_assembly.h): the tail joins the flash kernel (same values), unless a
// gradient is also needed by itself.
TEST(PassFuse, AttentionBackwardStoresItsGradientsAssembled) {
  auto m = parseFile(std::string(FUSEC_SOURCE_DIR) + "/tests/lit/passes/fuse-attention-assembly.fir");
  for (const char* pass : {"decompose-keep-attention", "canonicalize", "cse", "dce"}) createPass(pass)->run(*m);
  fuseChecked(*m, 1e-6);
  for (const char* f : {"assembled", "dq_also_returned"}) {
    const Graph& g = *m->find(f);
    int flashResults = -1;
    for (auto& op : g.ops)
      if (op->kind == OpKind::Kernel && classifyKernel(*op->body) == KernelFamily::Attention) flashResults = op->numResults();
    EXPECT_EQ(flashResults, std::string(f) == "assembled" ? 1 : 3) << printModule(*m);
  }
}

TEST(PassFuse, TinyForward) { modelChecked("forward"); }
TEST(PassFuse, TinyTrainStep) { modelChecked("train_step"); }

// The whole default pipeline on the tiny model, 3 training steps and bf16 included, is in
// tests/unit/pipeline_test.cpp.

}  // namespace
}  // namespace fusec

namespace fusec {
namespace {

// dce drops a kernel's unused results; fewer outputs can make another family (a multi_tensor
// left with one element count is a pointwise kernel), so dce records the family again.
TEST(PassFuse, DceRecordsTheFamilyOfAKernelItPrunes) {
  auto m = parseModule(R"(func @f {
  %x = input() {name = "x"} : f32[4]
  %y = input() {name = "y"} : f32[8]
  %a, %b = kernel(%x, %y) {name = "multi_tensor_0_adamw", family = "multi_tensor", hint = "adamw"} : f32[4], f32[8] {
    %p = input() {name = "p"} : f32[4]
    %q = input() {name = "q"} : f32[8]
    %e = exp(%p) : f32[4]
    %n = neg(%q) : f32[8]
    return %e, %n
  }
  return %a
})");
  Op& kernel = *m->funcs[0]->ops.back();
  ASSERT_EQ(kernelFamily(kernel), KernelFamily::MultiTensor);
  createPass("dce")->run(*m);
  verify(*m);
  const Op& pruned = *m->funcs[0]->ops.back();
  ASSERT_EQ(pruned.numResults(), 1);
  EXPECT_EQ(pruned.attrStr("family"), "pointwise");
  EXPECT_EQ(kernelFamily(pruned), classifyKernel(*pruned.body));
  EXPECT_EQ(kernelHintOf(pruned), kernelHint(*pruned.body, KernelFamily::Pointwise));
}

}  // namespace
}  // namespace fusec
