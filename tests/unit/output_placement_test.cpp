// Which outputs the C interface writes straight into the caller's buffer
// (passes/output_placement.h): a value or a reshape of it, each storage once; never a
// transpose, a slice, a source, a param's update or a step-invariant value.
#include <gtest/gtest.h>

#include "ir/parser.h"
#include "ir/verifier.h"
#include "passes/pass_manager.h"
#include "passes/output_placement.h"

namespace fusec {
namespace {

TEST(OutputPlacement, ReshapesOfArenaValuesMoveTheirBase) {
  auto m = parseModule(R"(func @f {
    %x = input() {name = "x"} : f32[4,8]
    %w = param() {name = "w"} : f32[4,8]
    %a = exp(%x) : f32[4,8]
    %ar = reshape(%a) : f32[32]
    %b = neg(%x) : f32[4,8]
    %bt = permute(%b) {perm = [1, 0]} : f32[8,4]
    %c = tanh(%x) : f32[4,8]
    %cs = slice(%c) {axis = 1, start = 0, end = 4} : f32[4,4]
    %d = sin(%x) : f32[4,8]
    %d1 = reshape(%d) : f32[2,16]
    %d2 = reshape(%d) : f32[32]
    %w.new = sub(%w, %a) : f32[4,8]
    %ke = kernel() {name = "table"} : f32[4,8] {
      %k = iota() {axis = 1} : f32[4,8]
      %e = exp(%k) : f32[4,8]
      return %e
    }
    return %ar, %bt, %cs, %d1, %d2, %x, %w.new -> "w", %ke, %a
  })");
  verify(*m);
  PassManager pm;
  pm.addPipeline("step-invariant,memory-plan");  // unfused: the views stay views
  pm.run(*m);
  const Graph& g = *m->funcs[0];
  const auto placed = outputPlacements(g);
  ASSERT_EQ(placed.size(), 9u);
  auto baseOf = [&](size_t i) {  // the value the output is a reshape of (itself if none)
    const Value* v = g.outputs[i];
    while (v->def && v->def->kind == OpKind::Reshape) v = v->def->operands[0];
    return v;
  };
  EXPECT_EQ(placed[0], baseOf(0));  // a reshape of exp(x): exp's storage moves
  EXPECT_NE(placed[0], nullptr);
  EXPECT_EQ(placed[1], nullptr);    // a transpose is a copy
  EXPECT_EQ(placed[2], nullptr);    // so is a slice
  EXPECT_EQ(placed[3], baseOf(3));  // the first of two reshapes of sin(x) owns it
  EXPECT_NE(placed[3], nullptr);
  EXPECT_EQ(placed[4], nullptr);    // the second copies
  EXPECT_EQ(placed[5], nullptr);    // a source
  EXPECT_EQ(placed[6], nullptr);    // a param's update stays in the param
  EXPECT_EQ(placed[7], nullptr);    // step-invariant: computed once, into its own slot
  EXPECT_EQ(placed[8], nullptr);    // exp(x) again: output 0 owns its storage
}

}  // namespace
}  // namespace fusec
