// codegen/lanes.h: which body inputs a vector loop reads as aligned 16-byte vectors, and at
// which element of its vector each lane reads, for the layouts the model's kernels have:
// slices of a merged GEMM output, concats, head permutes, RoPE's pairs, broadcasts.
#include <gtest/gtest.h>

#include "codegen/lanes.h"
#include "ir/builder.h"
#include "test_util.h"

namespace fusec {
namespace {

using codegen::LaneMap;
using test::f32;

// The lane offsets at which `input` is read when `root` is evaluated 8 lanes at a time,
// following the body from root to input (the first path found).
std::optional<codegen::VectorRead> readOf(const Value* root, const Value* input, int V = 8) {
  std::vector<std::pair<const Value*, LaneMap>> stack = {{root, codegen::outputLanes(root->type.shape, V)}};
  while (!stack.empty()) {
    auto [v, m] = stack.back();
    stack.pop_back();
    if (v == input) return codegen::vectorRead(v->type.shape, m, V);
    for (size_t k = 0; k < v->def->operands.size(); ++k)
      stack.push_back({v->def->operands[k], codegen::operandLanes(*v->def, k, m, V)});
  }
  ADD_FAILURE() << "input not reached";
  return std::nullopt;
}

std::vector<int64_t> iota8() { return {0, 1, 2, 3, 4, 5, 6, 7}; }

TEST(Lanes, InPlaceAndSlicesOfAMergedGemmOutput) {
  Graph g;
  Builder b(g);
  Value* h = b.input("h", f32({4, 48}));
  Value* a = b.slice(h, 1, 0, 24);
  Value* c = b.slice(h, 1, 24, 48);
  Value* y = b.binary(OpKind::Mul, a, c);
  EXPECT_EQ(readOf(y, h)->voff, iota8());  // both halves: starts 0 and 24 are multiples of 8
  Value* odd = b.unary(OpKind::Neg, b.slice(h, 1, 4, 28));
  EXPECT_FALSE(readOf(odd, h)) << "a half starting at 4 is not 8-aligned";
  // vectorInputs sees h through the aligned path.
  EXPECT_EQ(codegen::vectorInputs(g, {y}, 8), (std::vector<const Value*>{h}));
}

TEST(Lanes, ConcatAlongTheLastAxis) {
  Graph g;
  Builder b(g);
  Value* x = b.input("x", f32({4, 16}));
  Value* y = b.input("y", f32({4, 16}));
  Value* cat = b.concat({x, y}, 1);
  EXPECT_EQ(readOf(cat, x)->voff, iota8());
  EXPECT_EQ(readOf(cat, y)->voff, iota8());
  Value* z = b.input("z", f32({4, 12}));
  Value* w = b.input("w", f32({4, 4}));
  EXPECT_FALSE(readOf(b.concat({z, w}, 1), z)) << "12 is not a multiple of 8: a vector straddles the operands";
}

TEST(Lanes, PermutesThatKeepOrMoveTheLastAxis) {
  Graph g;
  Builder b(g);
  Value* x = b.input("x", f32({2, 8, 3, 16}));  // [B, T, H, D]
  EXPECT_EQ(readOf(b.permute(x, {0, 2, 1, 3}), x)->voff, iota8());  // head split: D stays last
  Value* t = b.input("t", f32({2, 16, 8}));
  EXPECT_FALSE(readOf(b.permute(t, {0, 2, 1}), t)) << "a transpose reads a column per vector";
}

TEST(Lanes, RopePairs) {
  // The decomposed RoPE: x [.., 16] as pairs [.., 8, 2], even = x0*c - x1*s, odd = x0*s + x1*c,
  // stacked on the pair axis and reshaped back.
  Graph g;
  Builder b(g);
  Value* x = b.input("x", f32({3, 16}));
  Value* cs = b.input("cs", f32({3, 8, 1}));
  Value* xp = b.reshape(x, {3, 8, 2});
  Value* x0 = b.slice(xp, 2, 0, 1);
  Value* x1 = b.slice(xp, 2, 1, 2);
  Value* even = b.binary(OpKind::Sub, b.binary(OpKind::Mul, x0, cs), b.binary(OpKind::Mul, x1, cs));
  Value* odd = b.binary(OpKind::Add, b.binary(OpKind::Mul, x0, cs), b.binary(OpKind::Mul, x1, cs));
  Value* y = b.reshape(b.concat({even, odd}, 2), {3, 16});
  // Following the first path (the odd branch's x1): lanes 1, 3, 5, 7 read elements 1, 3, 5, 7.
  auto r = readOf(y, x);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->firstActive, 1);
  for (int j : {1, 3, 5, 7}) EXPECT_EQ(r->voff[size_t(j)], j);
  // Every path through the pairs is a vector read, so the loop loads x as vectors.
  EXPECT_EQ(codegen::vectorInputs(g, {y}, 8), (std::vector<const Value*>{x}));
  // The cos table [.., 8, 1]: lanes 2k and 2k+1 share an element, and lane 0's pair index is
  // only known modulo 4 (its vector of 8 could start at pair 0 or 4): scalar loads.
  EXPECT_FALSE(readOf(y, cs));
}

TEST(Lanes, BroadcastsAreNotVectors) {
  Graph g;
  Builder b(g);
  Value* w = b.input("w", f32({16}));
  Value* rstd = b.input("rstd", f32({4, 1}));
  Value* x = b.input("x", f32({4, 16}));
  Value* y = b.binary(OpKind::Mul, b.binary(OpKind::Mul, x, b.broadcast(rstd, {4, 16})), b.broadcast(w, {4, 16}));
  EXPECT_EQ(readOf(y, x)->voff, iota8());
  EXPECT_EQ(readOf(y, w)->voff, iota8());  // the norm weight along the row: a vector too
  EXPECT_FALSE(readOf(y, rstd)) << "one element per row: a hoisted scalar load";
}

TEST(Lanes, OutputsThatVDoesNotDivide) {
  Graph g;
  Builder b(g);
  Value* x = b.input("x", f32({4, 12}));
  EXPECT_TRUE(codegen::outputLanes(x->type.shape, 8).broken);
  EXPECT_FALSE(readOf(b.unary(OpKind::Neg, x), x));
}

}  // namespace
}  // namespace fusec
