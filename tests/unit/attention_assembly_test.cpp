// ir/attention_assembly.h: which tails of an attention backward are stores of its gradients
// (the planner moves those into the flash kernel), and where each part lands. The fusion
// planner's use is tested in fuse_test.cpp (meaning) and lit passes/fuse-attention-assembly.fir
// (form); these pin the matcher's own decisions, the refusals above all.
#include <gtest/gtest.h>

#include <string>

#include "ir/attention_assembly.h"
#include "ir/parser.h"
#include "passes/pass.h"

namespace fusec {
namespace {

// A backward of q, k, v [2, 4, 8, 16] (bf16) whose dq goes through `rot` (text with %dq in and
// %r out, f32 [2, 4, 8, 16]) and the heads' merge, dk and dv through the merge alone, all three
// concatenated into [16, 192]; c and s are [8, 8] tables.
// `rotated` (dq by default) names the result that goes through the rotation in dq's place.
std::unique_ptr<Module> tail(const std::string& rot, const std::string& rotated = "dq") {
  return parseModule(R"(func @f {
  %q = input() {name = "q"} : bf16[2,4,8,16]
  %k = input() {name = "k"} : bf16[2,4,8,16]
  %v = input() {name = "v"} : bf16[2,4,8,16]
  %o = input() {name = "o"} : bf16[2,4,8,16]
  %do = input() {name = "do"} : bf16[2,4,8,16]
  %lse = input() {name = "lse"} : f32[2,4,8]
  %c = input() {name = "c"} : f32[8,8]
  %s = input() {name = "s"} : f32[8,8]
  %dq, %dk, %dv = attention_backward(%q, %k, %v, %o, %do, %lse) {scale = 0.25} : bf16[2,4,8,16], bf16[2,4,8,16], bf16[2,4,8,16]
  %x = cast(%)" + rotated + R"() : f32[2,4,8,16]
  %xp = reshape(%x) : f32[2,4,8,8,2]
  %x0 = slice(%xp) {axis = 4, start = 0, end = 1} : f32[2,4,8,8,1]
  %x1 = slice(%xp) {axis = 4, start = 1, end = 2} : f32[2,4,8,8,1]
  %c3 = reshape(%c) : f32[8,8,1]
  %cb = broadcast(%c3) : f32[2,4,8,8,1]
  %s3 = reshape(%s) : f32[8,8,1]
  %sb = broadcast(%s3) : f32[2,4,8,8,1]
)" + rot + R"(
  %rb = cast(%r) : bf16[2,4,8,16]
  %a = permute(%rb) {perm = [0, 2, 1, 3]} : bf16[2,8,4,16]
  %a2 = reshape(%a) : bf16[16,64]
  %b = permute(%dk) {perm = [0, 2, 1, 3]} : bf16[2,8,4,16]
  %b2 = reshape(%b) : bf16[16,64]
  %e = permute(%)" + std::string(rotated == "dv" ? "dq" : "dv") + R"() {perm = [0, 2, 1, 3]} : bf16[2,8,4,16]
  %e2 = reshape(%e) : bf16[16,64]
  %g = concat(%e2, %a2, %b2) {axis = 1} : bf16[16,192]
  return %g
})");
}

std::optional<std::vector<AssemblyPart>> match(const Module& m, std::vector<const Op*>* ops = nullptr) {
  const Graph& g = *m.funcs[0];
  const Op* att = nullptr;
  for (auto& op : g.ops)
    if (op->kind == OpKind::AttentionBackward) att = op.get();
  return matchAttentionAssembly(g.outputs[0], *att, ops);
}

const char* const kRotation = R"(
  %p = mul(%x0, %cb) : f32[2,4,8,8,1]
  %n = mul(%x1, %sb) : f32[2,4,8,8,1]
  %ev = sub(%p, %n) : f32[2,4,8,8,1]
  %p2 = mul(%sb, %x0) : f32[2,4,8,8,1]
  %n2 = mul(%x1, %cb) : f32[2,4,8,8,1]
  %od = add(%n2, %p2) : f32[2,4,8,8,1]
  %pr = concat(%ev, %od) {axis = 4} : f32[2,4,8,8,2]
  %r = reshape(%pr) : f32[2,4,8,16])";

TEST(AttentionAssembly, FindsEachPartAndItsRotation) {
  auto m = tail(kRotation);  // products and the sum in either order
  std::vector<const Op*> ops;
  auto parts = match(*m, &ops);
  ASSERT_TRUE(parts);
  ASSERT_EQ(parts->size(), 3u);
  const Graph& g = *m->funcs[0];
  for (const AssemblyPart& p : *parts) {
    // [b, h, t, c] of each result at b * 8 * 192 + t * 192 + h * 16 + c, plus its columns' start.
    EXPECT_EQ(p.strides, (std::vector<int64_t>{1536, 16, 192, 1}));
    const int64_t start[] = {64, 128, 0};  // dq, dk, dv in the concat's order e2, a2, b2
    EXPECT_EQ(p.offset, start[p.result]) << p.result;
    EXPECT_EQ(p.cos != nullptr, p.result == 0);
    if (p.result == 0) {
      EXPECT_EQ(p.cos->name, "c");
      EXPECT_EQ(p.sin->name, "s");
    }
  }
  // Every op of the tail: the casts, the rotation's 15, the merges and the concat.
  EXPECT_EQ(ops.size(), g.ops.size() - 9) << "all but the inputs and the attention";
}

// The rotation's text with its parts chosen: the ops of the two halves, the tables of the
// difference's products (x0's, x1's) and of the sum's, the halves' order, and what follows.
std::string rotation(const char* even, const char* c0, const char* s1, const char* s0, const char* c1, bool oddFirst,
                     const std::string& after = "") {
  return std::string("\n  %p = mul(%x0, ") + c0 + ") : f32[2,4,8,8,1]\n  %n = mul(%x1, " + s1 +
         ") : f32[2,4,8,8,1]\n  %ev = " + even + "(%p, %n) : f32[2,4,8,8,1]\n  %p2 = mul(%x0, " + s0 +
         ") : f32[2,4,8,8,1]\n  %n2 = mul(%x1, " + c1 + ") : f32[2,4,8,8,1]\n  %od = add(%p2, %n2) : f32[2,4,8,8,1]\n" +
         "  %pr = concat(" + (oddFirst ? "%od, %ev" : "%ev, %od") + ") {axis = 4} : f32[2,4,8,8,2]\n" +
         (after.empty() ? "  %r = reshape(%pr) : f32[2,4,8,16]" : "  %r0 = reshape(%pr) : f32[2,4,8,16]\n" + after);
}

TEST(AttentionAssembly, RefusesWhatIsNotTheRotation) {
  EXPECT_TRUE(match(*tail(rotation("sub", "%cb", "%sb", "%sb", "%cb", false))));   // the rotation itself
  EXPECT_FALSE(match(*tail(rotation("sub", "%sb", "%cb", "%sb", "%cb", false))));  // x0 s - x1 c
  EXPECT_FALSE(match(*tail(rotation("sub", "%cb", "%sb", "%sb", "%cb", true))));   // odd before even
  EXPECT_FALSE(match(*tail(rotation("add", "%cb", "%sb", "%sb", "%cb", false))));  // a sum for the difference
  // Anything else on the way: a scale of the rotated gradient.
  EXPECT_FALSE(match(*tail(rotation("sub", "%cb", "%sb", "%sb", "%cb", false, "  %r = add(%r0, %r0) : f32[2,4,8,16]"))));
  // dv rotated (dq and dv trade places): the kernel rotates dq and dk only.
  EXPECT_FALSE(match(*tail(rotation("sub", "%cb", "%sb", "%sb", "%cb", false), "dv")));
}

// A backward of q = k = v [2, 4, 8, 16] (bf16) whose results `rest` returns as %out.
std::unique_ptr<Module> gradients(const std::string& rest) {
  return parseModule("func @f {\n  %q = input() {name = \"q\"} : bf16[2,4,8,16]\n  %lse = input() {name = \"lse\"} : f32[2,4,8]\n"
                     "  %dq, %dk, %dv = attention_backward(%q, %q, %q, %q, %q, %lse) {scale = 0.25} : bf16[2,4,8,16], "
                     "bf16[2,4,8,16], bf16[2,4,8,16]\n  " + rest + "\n  return %out\n}");
}

// A result stored twice, or with its head dim strided, is not a store the kernel can make.
TEST(AttentionAssembly, RefusesRepeatedOrStridedParts) {
  EXPECT_FALSE(match(*gradients("%out = concat(%dv, %dv) {axis = 3} : bf16[2,4,8,32]")));
  EXPECT_FALSE(match(*gradients("%out = permute(%dv) {perm = [0, 1, 3, 2]} : bf16[2,4,16,8]")));
  auto parts = match(*gradients("%out = concat(%dq, %dv) {axis = 3} : bf16[2,4,8,32]"));
  ASSERT_TRUE(parts);
  EXPECT_EQ((*parts)[1].offset, 16);
  EXPECT_EQ((*parts)[1].strides, (std::vector<int64_t>{1024, 256, 32, 1}));
}

}  // namespace
}  // namespace fusec
