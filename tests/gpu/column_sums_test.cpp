// Column sums on the GPU: a row kernel that also sums its elements down the rows (the
// rmsnorm backward with its weight gradient, fusion/domain.h columnSums) in each of its
// accumulator placements (registers, shared memory, the unrolled pass of rows too long for
// registers), and column reductions that stay kernels of their own (split in two or not).
// Each against the CPU interpreter, and run three times: the cross-block finish must give
// the same bits every launch (its counters reset themselves). Skips without a device.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "api/compile.h"
#include "ir/interpreter.h"
#include "ir/parser.h"
#include "runtime/device.h"
#include "runtime/executable.h"
#include "test_util.h"

namespace fusec {
namespace {

class ColumnSums : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  }
};

std::string ty(const std::string& dt, int64_t a, int64_t b) {
  return dt + "[" + std::to_string(a) + "," + std::to_string(b) + "]";
}

// `text` with every $NAME of `subs` replaced (the types of one shape of a test graph).
std::string fill(std::string text, const std::vector<std::pair<std::string, std::string>>& subs) {
  for (const auto& [key, value] : subs)
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
      text.replace(at, key.size(), value);
  return text;
}

// An rmsnorm backward over R rows of n: dx, and the weight gradient sum(dy * x * rstd) over
// the rows. dy in `dt` (bf16 in a bf16 step), x and rstd in f32.
std::string rmsnormBackward(const std::string& dt, int64_t R, int64_t n) {
  return fill(R"(func @rmsnorm_bwd {
  %dyi = input() {name = "dy"} : $D
  %x = input() {name = "x"} : $F
  %r = input() {name = "r"} : $ROW
  %w = input() {name = "w"} : $COL
  %dy = cast(%dyi) : $F
  %rb = broadcast(%r) : $F
  %wb = broadcast(%w) : $F
  %xn = mul(%x, %rb) : $F
  %g = mul(%dy, %xn) : $F
  %dw = sum(%g) {axes = [0]} : $COL
  %dyw = mul(%dy, %wb) : $F
  %p = mul(%dyw, %xn) : $F
  %m = mean(%p) {axes = [1], keepdim = true} : $ROW
  %mb = broadcast(%m) : $F
  %t = mul(%xn, %mb) : $F
  %u = sub(%dyw, %t) : $F
  %dx = mul(%u, %rb) : $F
  return %dx, %dw
}
)",
              {{"$D", ty(dt, R, n)}, {"$F", ty("f32", R, n)}, {"$ROW", ty("f32", R, 1)},
               {"$COL", "f32[" + std::to_string(n) + "]"}});
}

// Rows of n too long for registers beside four inputs: the column maxima of a + b * c * d
// and the row sums.
std::string wideRows(int64_t R, int64_t n) {
  return fill(R"(func @wide {
  %a = input() {name = "a"} : $F
  %b = input() {name = "b"} : $F
  %c = input() {name = "c"} : $F
  %d = input() {name = "d"} : $F
  %bc = mul(%b, %c) : $F
  %bcd = mul(%bc, %d) : $F
  %s = add(%a, %bcd) : $F
  %cm = reduce_max(%s) {axes = [0]} : $COL
  %rs = sum(%s) {axes = [1], keepdim = true} : $ROW
  return %rs, %cm
}
)",
              {{"$F", ty("f32", R, n)}, {"$ROW", ty("f32", R, 1)}, {"$COL", "f32[" + std::to_string(n) + "]"}});
}

// A column sum with no row reduction beside it: a col_reduce kernel (two when split).
std::string plainColumnSum(int64_t R, int64_t n) {
  return fill(R"(func @colsum {
  %x = input() {name = "x"} : $F
  %y = input() {name = "y"} : $F
  %p = mul(%x, %y) : $F
  %g = sum(%p) {axes = [0]} : $COL
  return %g
}
)",
              {{"$F", ty("f32", R, n)}, {"$COL", "f32[" + std::to_string(n) + "]"}});
}

// A bias gradient beside the activation's backward (GPT-2's MLP): the full-shaped gradient
// in `dt` and its column sum, one col_reduce kernel (two when split) writing the gradient in
// the sums' pass.
std::string activationBiasGrad(const std::string& dt, int64_t R, int64_t n) {
  return fill(R"(func @bias_grad {
  %dyi = input() {name = "dy"} : $D
  %x = input() {name = "x"} : $F
  %b = input() {name = "b"} : $COL
  %dy = cast(%dyi) : $F
  %bb = broadcast(%b) : $F
  %h = add(%x, %bb) : $F
  %t = tanh(%h) : $F
  %tt = mul(%t, %t) : $F
  %one = constant() {value = 1} : $F
  %d = sub(%one, %tt) : $F
  %g = mul(%dy, %d) : $F
  %go = cast(%g) : $D
  %db = sum(%g) {axes = [0]} : $COL
  return %go, %db
}
)",
              {{"$D", ty(dt, R, n)}, {"$F", ty("f32", R, n)}, {"$COL", "f32[" + std::to_string(n) + "]"}});
}

// Three column sums beside a row of three inputs (GPT-2's layernorm backward): too many
// accumulators for registers or shared memory at a warp a row, so two warps take a row.
std::string threeColumnSums(int64_t R, int64_t n) {
  return fill(R"(func @three_sums {
  %dyi = input() {name = "dy"} : $D
  %x = input() {name = "x"} : $F
  %z = input() {name = "z"} : $F
  %dy = cast(%dyi) : $F
  %a = mul(%dy, %x) : $F
  %m = mean(%a) {axes = [1], keepdim = true} : $ROW
  %mb = broadcast(%m) : $F
  %d = sub(%z, %mb) : $F
  %e = mul(%d, %dy) : $F
  %s0 = sum(%a) {axes = [0]} : $COL
  %s1 = sum(%dy) {axes = [0]} : $COL
  %s2 = sum(%e) {axes = [0]} : $COL
  return %e, %s0, %s1, %s2
}
)",
              {{"$D", ty("bf16", R, n)}, {"$F", ty("f32", R, n)}, {"$ROW", ty("f32", R, 1)},
               {"$COL", "f32[" + std::to_string(n) + "]"}});
}

int countKernels(const Graph& g, const std::string& family) {
  int n = 0;
  for (auto& op : g.ops) n += op->kind == OpKind::Kernel && op->attrStr("name").rfind(family, 0) == 0;
  return n;
}

// Optimises `text`, checks its kernels, runs it three times on random inputs (rstd-like
// inputs positive) and compares every output with the interpreter on the unoptimised graph.
void check(const std::string& text, int rowKernels, int colKernels, double tol, uint32_t seed) {
  auto m = parseModule(text);
  Graph& g = *m->funcs.at(0);
  std::mt19937 rng(seed);
  Bindings env;
  for (const Op* in : g.inputs()) {
    const std::string name = in->attrStr("name");
    env[name] = test::randomNonZero(in->result()->type, rng, 1.0, /*positive=*/name == "r");
  }
  const std::vector<HostTensor> want = interpret(g, env);
  api::lowerProgram(*m, "", {.programPasses = false});
  EXPECT_EQ(countKernels(*m->funcs.at(0), "row_reduce"), rowKernels) << g.name;
  EXPECT_EQ(countKernels(*m->funcs.at(0), "col_reduce"), colKernels) << g.name;
  rt::Executable exe(*m->funcs.at(0));
  exe.bind(env);
  std::vector<HostTensor> first;
  for (int run = 0; run < 3; ++run) {
    exe.run();
    for (size_t i = 0; i < want.size(); ++i) {
      const HostTensor got = exe.output(i);
      if (run == 0) {
        const double e = test::normRelError(got, want[i]);
        std::printf("%s output %zu: %.3g\n", g.name.c_str(), i, e);
        EXPECT_LE(e, tol) << g.name << " output " << i;
        first.push_back(got);
        continue;
      }
      size_t differ = 0;
      for (size_t k = 0; k < got.size(); ++k) differ += got.get(k) != first[i].get(k);
      EXPECT_EQ(differ, 0u) << g.name << " output " << i << " changed on run " << run;
    }
  }
}

// Warp-per-row kernels: small's and medium's shapes (registers; shared memory), rows that
// leave most warps one row or none (37), and a block per row (2048 columns).
TEST_F(ColumnSums, RmsnormBackwardWeightGradient) {
  check(rmsnormBackward("bf16", 4096, 768), 1, 0, 1e-5, 1);
  check(rmsnormBackward("f32", 4096, 768), 1, 0, 1e-6, 2);
  check(rmsnormBackward("bf16", 2048, 1024), 1, 0, 1e-5, 3);
  check(rmsnormBackward("f32", 37, 48), 1, 0, 1e-6, 4);
  check(rmsnormBackward("f32", 300, 2048), 1, 0, 1e-6, 5);
}

TEST_F(ColumnSums, RowsTooLongForRegisters) { check(wideRows(3, 16000), 1, 0, 1e-6, 6); }

// 8192 rows are split in two col_reduce launches; 100 rows are one.
TEST_F(ColumnSums, ColumnReductionsOfTheirOwn) {
  check(plainColumnSum(8192, 64), 0, 2, 1e-6, 7);
  check(plainColumnSum(100, 48), 0, 1, 1e-6, 8);
}

TEST_F(ColumnSums, ThreeSumsBesideThreeInputs) {
  check(threeColumnSums(8192, 768), 1, 0, 1e-5, 13);
  check(threeColumnSums(37, 768), 1, 0, 1e-5, 14);
}

// The gradient written in the sums' pass: split in two launches (8192 rows), one launch of
// 8-column tiles (32,768 columns), and one column a thread (48 columns).
TEST_F(ColumnSums, FullOutputBesideItsColumnSum) {
  check(activationBiasGrad("f32", 8192, 3072), 0, 2, 1e-5, 9);
  check(activationBiasGrad("bf16", 8192, 3072), 0, 2, 1e-2, 10);
  check(activationBiasGrad("bf16", 96, 32768), 0, 1, 1e-2, 11);
  check(activationBiasGrad("f32", 100, 48), 0, 1, 1e-5, 12);
}

}  // namespace
}  // namespace fusec
