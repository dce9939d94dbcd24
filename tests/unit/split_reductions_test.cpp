// split-reductions: which reductions it splits and how (enough partials of at least 64 rows
// for 65,536 partial sums), that both
// stages are col_reduce kernels after fuse, and that the interpreter's result is unchanged up
// to f32 reassociation on random non-zero inputs.
#include <gtest/gtest.h>

#include <random>

#include "ir/builder.h"
#include "ir/interpreter.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/fusion/domain.h"
#include "passes/fusion/kernel_family.h"
#include "passes/pass.h"
#include "test_util.h"

namespace fusec {
namespace {

using test::f32;

// A graph computing op(x * y) over `axes` of `shape` (the product is what fuse pulls into
// the col_reduce kernel, as the norm-weight gradient's dy * xhat).
std::unique_ptr<Module> reductionModule(OpKind op, Shape shape, std::vector<int64_t> axes, DType dt = DType::f32) {
  auto m = std::make_unique<Module>();
  Graph& g = m->add("f");
  Builder b(g);
  Value* x = b.input("x", Type{dt, shape});
  Value* y = b.input("y", Type{dt, shape});
  b.output(b.reduce(op, b.binary(OpKind::Mul, x, y), std::move(axes)));
  return m;
}

int countKind(const Graph& g, OpKind k) {
  int n = 0;
  for (const auto& op : g.ops) n += op->kind == k;
  return n;
}

void expectSameResults(const Module& before, const Module& after, double rel) {
  std::mt19937 rng(5);
  Bindings env;
  for (const Op* in : before.funcs[0]->inputs()) env[in->attrStr("name")] = test::randomNonZero(in->result()->type, rng);
  const auto want = interpret(*before.funcs[0], env), got = interpret(*after.funcs[0], env);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].type, got[i].type);
    EXPECT_LE(test::normRelError(got[i], want[i]), rel);
  }
}

TEST(SplitReductions, SplitsLongColumnSums) {
  for (OpKind op : {OpKind::Sum, OpKind::RMax, OpKind::RMin}) {
    auto m = reductionModule(op, {8, 512, 96}, {0, 1});
    auto before = cloneModule(*m);
    ASSERT_TRUE(createPass("split-reductions")->run(*m));
    verify(*m);
    const Graph& g = *m->funcs[0];
    EXPECT_EQ(countKind(g, op), 2);
    // 4096 rows of 96 columns: 64 partials of 64 rows (the most; 65,536 / 96 would need 683),
    // [64, 64, 96] reduced over its middle axis.
    const Op* partial = nullptr;
    for (const auto& o : g.ops)
      if (o->kind == op && !partial) partial = o.get();
    ASSERT_TRUE(partial);
    EXPECT_EQ(partial->operands[0]->type.shape, (Shape{64, 64, 96}));
    EXPECT_EQ(partial->result()->type.shape, (Shape{64, 96}));
    const fusion::Domain d = fusion::domainOf(*partial);
    EXPECT_EQ(d.kind, fusion::DomainKind::Col);
    EXPECT_EQ(d.n, 64 * 96);
    EXPECT_EQ(d.r, 64);
    EXPECT_EQ(g.outputs[0]->type.shape, (Shape{96}));
    expectSameResults(*before, *m, op == OpKind::Sum ? 1e-6 : 0);
    EXPECT_FALSE(createPass("split-reductions")->run(*m)) << printModule(*m);  // the partials are short
  }
}

TEST(SplitReductions, KeepdimAndSizeOneDims) {
  auto m = reductionModule(OpKind::Sum, {4096, 1, 40}, {0, 1}, DType::f32);
  auto before = cloneModule(*m);
  ASSERT_TRUE(createPass("split-reductions")->run(*m));
  verify(*m);
  EXPECT_EQ(m->funcs[0]->outputs[0]->type.shape, (Shape{40}));
  expectSameResults(*before, *m, 1e-6);
}

TEST(SplitReductions, LeavesOtherReductionsAlone) {
  struct Case {
    const char* why;
    std::unique_ptr<Module> m;
  };
  Case cases[] = {
      {"short columns (2048 rows: one kernel is short enough)", reductionModule(OpKind::Sum, {2048, 96}, {0})},
      {"rows (trailing axis)", reductionModule(OpKind::Sum, {8192, 96}, {1})},
      {"all axes", reductionModule(OpKind::Sum, {8192, 96}, {0, 1})},
      {"mean", reductionModule(OpKind::Mean, {8192, 96}, {0})},
      {"bf16 (partials would round twice)", reductionModule(OpKind::Sum, {8192, 96}, {0}, DType::bf16)},
      {"a prime row count", reductionModule(OpKind::Sum, {2053, 96}, {0})},
  };
  for (auto& c : cases) {
    const std::string text = printModule(*c.m);
    EXPECT_FALSE(createPass("split-reductions")->run(*c.m)) << c.why;
    EXPECT_EQ(printModule(*c.m), text) << c.why;
  }
}

// Wide columns need fewer partials: small's norm-weight gradient at batch 64 (16,384 rows of
// 768) gets 128 partials of 128 rows (98,304 sums; 64 would give 49,152 < 65,536).
TEST(SplitReductions, FewestPartialsThatFillTheTarget) {
  auto m = reductionModule(OpKind::Sum, {64, 256, 768}, {0, 1});
  ASSERT_TRUE(createPass("split-reductions")->run(*m));
  const Op* partial = nullptr;
  for (const auto& o : m->funcs[0]->ops)
    if (o->kind == OpKind::Sum && !partial) partial = o.get();
  ASSERT_TRUE(partial);
  EXPECT_EQ(partial->operands[0]->type.shape, (Shape{128, 128, 768}));
}

// After fuse, both stages are col_reduce kernels: the product is the first one's prologue.
TEST(SplitReductions, BothStagesAreColumnReductionKernels) {
  auto m = reductionModule(OpKind::Sum, {16, 256, 64}, {0, 1});
  auto before = cloneModule(*m);
  for (const char* p : {"split-reductions", "fuse"}) createPass(p)->run(*m);
  verify(*m);
  std::vector<KernelFamily> families;
  for (const auto& op : m->funcs[0]->ops)
    if (op->kind == OpKind::Kernel) families.push_back(classifyKernel(*op->body));
  EXPECT_EQ(families, (std::vector<KernelFamily>{KernelFamily::ColReduce, KernelFamily::ColReduce})) << printModule(*m);
  expectSameResults(*before, *m, 1e-6);
}

}  // namespace
}  // namespace fusec
