// ir/numbering.h: ops numbered in order, values after their op's earlier results; numbers
// name ops (a reordering keeps them), and an op the numbering did not number is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "ir/numbering.h"
#include "ir/parser.h"
#include "passes/liveness.h"

namespace fusec {
namespace {

constexpr const char* kText = R"(func @f {
  %x = input() {name = "x"} : f32[8,8]
  %a = exp(%x) : f32[8,8]
  %s0, %s1 = kernel(%a, %x) {name = "two"} : f32[8,8], f32[8,8] {
    %p = input() {name = "p"} : f32[8,8]
    %q = input() {name = "q"} : f32[8,8]
    %r = add(%p, %q) : f32[8,8]
    %t = neg(%p) : f32[8,8]
    return %r, %t
  }
  %b = add(%s0, %s1) : f32[8,8]
  return %b
})";

TEST(GraphNumbering, OpsInOrderAndValuesAfterTheirOpsEarlierResults) {
  auto m = parseModule(kText);
  const Graph& g = *m->funcs[0];
  GraphNumbering n(g);
  ASSERT_EQ(n.numOps(), 4u);
  EXPECT_EQ(n.numValues(), 5u);  // x, a, s0, s1, b
  for (size_t i = 0; i < g.ops.size(); ++i) EXPECT_EQ(n.of(g.ops[i].get()), i);
  std::set<size_t> seen;
  for (auto& op : g.ops)
    for (auto& r : op->results) seen.insert(n.of(r.get()));
  EXPECT_EQ(seen, (std::set<size_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(n.of(g.ops[2]->result(1)), n.of(g.ops[2]->result(0)) + 1);
}

TEST(GraphNumbering, AReorderingKeepsTheNumbers) {
  auto m = parseModule(kText);
  Graph& g = *m->funcs[0];
  GraphNumbering n(g);
  std::vector<size_t> before;
  for (auto& op : g.ops) before.push_back(n.of(op->result()));
  const Op* exp = g.ops[1].get();
  std::reverse(g.ops.begin(), g.ops.end());
  EXPECT_EQ(n.of(exp), 1u);
  EXPECT_EQ(n.of(exp->result()), before[1]);
}

TEST(GraphNumbering, AnOpItDidNotNumberIsRefused) {
  auto m = parseModule(kText);
  const Graph& g = *m->funcs[0];
  GraphNumbering n(g);
  const Graph& body = *g.ops[2]->body;
  // A body op carries a number of its own (here 0 and 1 were never set, and 7 is past the end).
  body.ops[3]->number = 7;
  EXPECT_THROW(n.of(body.ops[3]->result()), Error);
#ifndef NDEBUG
  // Debug builds also see an op under a number another op has.
  body.ops[2]->number = 1;
  EXPECT_THROW(n.of(body.ops[2]->result()), Error);
#endif
}

// StorageMap and computeLiveness read the map's numbering, made when the map was: after the
// ops are reordered (as schedule does between its candidates), liveness follows the new order.
TEST(GraphNumbering, LivenessOfAReorderedGraphFromTheMapsNumbers) {
  auto m = parseModule(R"(func @f {
    %x = input() {name = "x"} : f32[8,8]
    %a = exp(%x) : f32[8,8]
    %b = neg(%x) : f32[8,8]
    %c = add(%a, %b) : f32[8,8]
    return %c
  })");
  Graph& g = *m->funcs[0];
  const StorageMap storage(g);
  std::swap(g.ops[1], g.ops[2]);  // b before a
  const Liveness l = computeLiveness(g, storage);
  ASSERT_EQ(l.buffers.size(), 3u);
  EXPECT_EQ(l.buffers[0].value, g.ops[1]->result());  // %b, defined first now
  EXPECT_EQ(l.buffers[0].def, 1);
  EXPECT_EQ(l.buffers[0].lastUse, 3);
  EXPECT_EQ(storage.of(g.ops[2]->result()), Storage::Arena);
}

}  // namespace
}  // namespace fusec
