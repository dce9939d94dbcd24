// The builder's shape/dtype inference and its precise errors; the verifier on graphs built
// in memory (where there is no text location to report).
#include <gtest/gtest.h>

#include <functional>

#include "ir/builder.h"
#include "test_util.h"
#include "ir/printer.h"
#include "ir/verifier.h"

using namespace fusec;
using namespace fusec::test;

namespace {



TEST(Builder, InfersShapes) {
  Module m;
  Builder b(m.add("f"));
  Value* x = b.input("x", f32({2, 3, 4}));
  EXPECT_EQ(b.reduce(OpKind::Sum, x, {-1})->type, f32({2, 3}));
  EXPECT_EQ(b.reduce(OpKind::Mean, x, {0, 2}, true)->type, f32({1, 3, 1}));
  EXPECT_EQ(b.permute(x, {2, 0, 1})->type, f32({4, 2, 3}));
  EXPECT_EQ(b.slice(x, 2, 1, 4, 2)->type, f32({2, 3, 2}));
  EXPECT_EQ(b.concat({x, x}, 1)->type, f32({2, 6, 4}));
  Value* w = b.param("w", f32({5, 4}));
  EXPECT_EQ(b.matmul(x, w, false, true)->type, f32({2, 3, 5}));
  Value* bw = b.param("bw", f32({2, 4, 3}));
  EXPECT_EQ(b.matmul(x, bw, true, true)->type, f32({2, 4, 4}));
  Value* c = b.binary(OpKind::Lt, x, x);
  EXPECT_EQ(c->type.dtype, DType::boolean);
  EXPECT_EQ(b.select(c, x, x)->type, x->type);
  Value* idx = b.input("idx", Type{DType::i64, {2, 3, 7}});
  EXPECT_EQ(b.gather(x, idx, 2)->type, f32({2, 3, 7}));
  EXPECT_EQ(b.scatterAdd(x, idx, b.gather(x, idx, 2), 2)->type, x->type);
  Value* logits = b.input("logits", f32({6, 10}));
  Value* tgt = b.input("t", Type{DType::i64, {6}});
  EXPECT_EQ(b.create1(OpKind::CrossEntropy, {logits, tgt})->type, f32({}));
  EXPECT_NO_THROW(verify(m));
}

TEST(Builder, RejectsBadCombinationsPrecisely) {
  Module m;
  Builder b(m.add("f"));
  Value* x = b.input("x", f32({2, 3}));
  Value* y = b.input("y", f32({3, 2}));
  Value* i = b.input("i", Type{DType::i64, {2, 3}});
  EXPECT_EQ(errorOf([&] { b.binary(OpKind::Add, x, y); }), "add operands must have the same type, got f32[2,3], f32[3,2]");
  EXPECT_EQ(errorOf([&] { b.unary(OpKind::Exp, i); }), "exp operand must be a float type (f32, bf16, f16), got i64[2,3]");
  EXPECT_EQ(errorOf([&] { b.matmul(x, x); }), "matmul contraction sizes differ: 3 vs 2 for f32[2,3] x f32[2,3]");
  EXPECT_EQ(errorOf([&] { b.reduce(OpKind::Sum, x, {2}); }), "sum axis 2 is out of range for rank 2");
  EXPECT_EQ(errorOf([&] { b.reduce(OpKind::Sum, x, {1, -1}); }), "sum axis -1 listed twice");
  EXPECT_EQ(errorOf([&] { b.reshape(x, {4}); }), "reshape changes the element count: f32[2,3] (6) to f32[4] (4)");
  EXPECT_EQ(errorOf([&] { b.broadcast(x, {2, 4}); }), "cannot broadcast f32[2,3] to f32[2,4]: dimension 1 is 3");
  EXPECT_EQ(errorOf([&] { b.slice(x, 1, 2, 5); }), "slice [2, 5) is out of range for dimension of size 3");
  EXPECT_EQ(errorOf([&] { b.permute(x, {0, 0}); }), "permute perm is not a permutation of 0..1");
  EXPECT_EQ(errorOf([&] { b.create1(OpKind::Sum, {x}); }), "sum requires attribute 'axes'");
  EXPECT_EQ(errorOf([&] { b.create1(OpKind::Neg, {x}, {{"axis", int64_t(1)}}); }), "neg has no attribute 'axis'");
  EXPECT_EQ(errorOf([&] { b.create1(OpKind::Softmax, {x}, {{"axis", 1.5}}); }), "softmax attribute 'axis' must be of kind int");
  EXPECT_EQ(errorOf([&] { b.gather(x, x, 0); }), "gather index must be i64 or i32, got f32[2,3]");
  EXPECT_EQ(errorOf([&] { b.create1(OpKind::RMSNorm, {x, x}); }), "rmsnorm weight must be f32[3], got f32[2,3]");
  EXPECT_EQ(errorOf([&] { b.create1(OpKind::Neg, {x}, {}, {f32({9})}); }),
            "result type f32[9] does not match the inferred f32[2,3]");
  EXPECT_EQ(errorOf([&] { b.constant(0.5, Type{DType::i32, {}}); }), "constant 0.5 is not representable in i32");
}

TEST(Verifier, CatchesUseAcrossGraphs) {
  Module m;
  Builder a(m.add("a"));
  Value* x = a.input("x", f32({2}));
  a.output(x);
  Builder b(m.add("b"));
  Value* y = b.input("y", f32({2}));
  b.output(b.binary(OpKind::Add, x, y));  // x belongs to @a
  EXPECT_EQ(errorOf([&] { verify(m); }),
            "@b, op #1 (add): operand 0 is used before it is defined (or comes from another graph)");
}

// The verifier stamps each value it sees defined with the id of its walk: a graph verified
// once and then reordered so that a use comes before its definition (the stamps of the first
// walk still on every value) must fail.
TEST(Verifier, StampsOfAnEarlierWalkDoNotCount) {
  Module m;
  Builder b(m.add("f"));
  Value* x = b.input("x", f32({2}));
  Value* y = b.unary(OpKind::Neg, x);
  b.output(b.unary(OpKind::Exp, y));
  EXPECT_NO_THROW(verify(m));
  Graph& g = *m.find("f");
  std::swap(g.ops[1], g.ops[2]);  // exp(y) before neg
  EXPECT_EQ(errorOf([&] { verify(m); }),
            "@f, op #1 (exp): operand 0 is used before it is defined (or comes from another graph)");
  std::swap(g.ops[1], g.ops[2]);
  EXPECT_NO_THROW(verify(m));
}

TEST(Verifier, CatchesTamperedTypesAndNames) {
  Module m;
  Builder b(m.add("f"));
  Value* x = b.input("x", f32({2}));
  Value* y = b.unary(OpKind::Neg, x);
  b.output(y);
  y->type = f32({3});
  EXPECT_EQ(errorOf([&] { verify(m); }), "@f, op #1 (neg): result type f32[3] does not match the inferred f32[2]");
  y->type = f32({2});
  y->name = "42";
  EXPECT_EQ(errorOf([&] { verify(m); }), "@f, op #1 (neg): invalid value name '%42'");
  y->name = "x y";
  EXPECT_NE(errorOf([&] { verify(m); }).find("invalid value name"), std::string::npos);
  y->name = "ok";
  EXPECT_NO_THROW(verify(m));
}

TEST(Builder, CloneIsDeepAndPrintsTheSame) {
  Module m;
  Builder b(m.add("f"));
  Value* x = b.input("x", f32({2, 2}));
  auto body = std::make_unique<Graph>();
  Builder bb(*body);
  bb.output(bb.unary(OpKind::Exp, bb.input("a", f32({2, 2}))));
  b.output(b.create(OpKind::Kernel, {x}, {{"name", std::string("k")}}, {f32({2, 2})}, std::move(body)).at(0));
  auto c = cloneModule(m);
  EXPECT_EQ(printModule(*c), printModule(m));
  EXPECT_NE(c->funcs[0]->ops[1]->body.get(), m.funcs[0]->ops[1]->body.get());
  EXPECT_NO_THROW(verify(*c));
}

}  // namespace
