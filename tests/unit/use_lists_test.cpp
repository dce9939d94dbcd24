// ir/use_lists.h: every value's readers in program order (twice for an op that reads it
// twice) and its output count, and a rewrite's hand-over of them.
#include <gtest/gtest.h>

#include "ir/parser.h"
#include "ir/use_lists.h"

namespace fusec {
namespace {

TEST(UseLists, ReadersInOrderTwiceWhenReadTwiceAndOutputsCounted) {
  auto m = parseModule(R"(func @f {
    %x = input() {name = "x"} : f32[8]
    %a = exp(%x) : f32[8]
    %b = mul(%a, %a) : f32[8]
    %c = add(%x, %b) : f32[8]
    return %c, %b, %c
  })");
  const Graph& g = *m->funcs[0];
  const GraphNumbering n(g);
  const UseLists u(g, n);
  auto readers = [&](int op) {
    auto r = u.readers(g.ops[size_t(op)]->result());
    return std::vector<const Op*>(r.begin(), r.end());
  };
  EXPECT_EQ(readers(0), (std::vector<const Op*>{g.ops[1].get(), g.ops[3].get()}));
  EXPECT_EQ(readers(1), (std::vector<const Op*>{g.ops[2].get(), g.ops[2].get()}));
  EXPECT_EQ(readers(3), std::vector<const Op*>{});
  EXPECT_EQ(u.outputs(g.ops[3]->result()), 2);
  EXPECT_EQ(u.uses(g.ops[3]->result()), 2u);
  EXPECT_EQ(u.uses(g.ops[2]->result()), 2u);  // %c and an output
}

TEST(UseLists, MovedUsesBelongToTheNewValueAndTheOldHasNone) {
  auto m = parseModule(R"(func @f {
    %x = input() {name = "x"} : f32[8]
    %a = exp(%x) : f32[8]
    %b = neg(%a) : f32[8]
    %c = add(%b, %b) : f32[8]
    return %b
  })");
  const Graph& g = *m->funcs[0];
  const GraphNumbering n(g);
  UseLists u(g, n);
  const Value* a = g.ops[1]->result();
  const Value* b = g.ops[2]->result();
  u.moveUses(b, a);  // as a rewrite that replaced %b by %a would
  EXPECT_EQ(u.readers(a).size(), 2u);
  EXPECT_EQ(u.readers(a)[0], g.ops[3].get());
  EXPECT_EQ(u.outputs(a), 1);
  EXPECT_EQ(u.uses(b), 0u);
  EXPECT_TRUE(u.readers(b).empty());
}

}  // namespace
}  // namespace fusec
