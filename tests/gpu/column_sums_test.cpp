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

// An rmsnorm backward over R rows of n: dx, and the weight gradient sum(dy * x * rstd) over
// the rows. dy in `dt` (bf16 in a bf16 step), x and rstd in f32.
std::string rmsnormBackward(const std::string& dt, int64_t R, int64_t n) {
  const std::string f = ty("f32", R, n), d = ty(dt, R, n), r1 = ty("f32", R, 1);
  const std::string w = "f32[" + std::to_string(n) + "]";
  return "func @rmsnorm_bwd {\n"
         "  %dyi = input() {name = \"dy\"} : " + d + "\n"
         "  %x = input() {name = \"x\"} : " + f + "\n"
         "  %r = input() {name = \"r\"} : " + r1 + "\n"
         "  %w = input() {name = \"w\"} : " + w + "\n"
         "  %dy = cast(%dyi) : " + f + "\n"
         "  %rb = broadcast(%r) : " + f + "\n"
         "  %wb = broadcast(%w) : " + f + "\n"
         "  %xn = mul(%x, %rb) : " + f + "\n"
         "  %g = mul(%dy, %xn) : " + f + "\n"
         "  %dw = sum(%g) {axes = [0]} : " + w + "\n"
         "  %dyw = mul(%dy, %wb) : " + f + "\n"
         "  %p = mul(%dyw, %xn) : " + f + "\n"
         "  %m = mean(%p) {axes = [1], keepdim = true} : " + r1 + "\n"
         "  %mb = broadcast(%m) : " + f + "\n"
         "  %t = mul(%xn, %mb) : " + f + "\n"
         "  %u = sub(%dyw, %t) : " + f + "\n"
         "  %dx = mul(%u, %rb) : " + f + "\n"
         "  return %dx, %dw\n}\n";
}

// Rows of n too long for registers beside four inputs: the column maxima of a + b * c * d
// and the row sums.
std::string wideRows(int64_t R, int64_t n) {
  const std::string f = ty("f32", R, n);
  return "func @wide {\n"
         "  %a = input() {name = \"a\"} : " + f + "\n"
         "  %b = input() {name = \"b\"} : " + f + "\n"
         "  %c = input() {name = \"c\"} : " + f + "\n"
         "  %d = input() {name = \"d\"} : " + f + "\n"
         "  %bc = mul(%b, %c) : " + f + "\n"
         "  %bcd = mul(%bc, %d) : " + f + "\n"
         "  %s = add(%a, %bcd) : " + f + "\n"
         "  %cm = reduce_max(%s) {axes = [0]} : f32[" + std::to_string(n) + "]\n"
         "  %rs = sum(%s) {axes = [1], keepdim = true} : " + ty("f32", R, 1) + "\n"
         "  return %rs, %cm\n}\n";
}

// A column sum with no row reduction beside it: a col_reduce kernel (two when split).
std::string plainColumnSum(int64_t R, int64_t n) {
  const std::string f = ty("f32", R, n);
  return "func @colsum {\n"
         "  %x = input() {name = \"x\"} : " + f + "\n"
         "  %y = input() {name = \"y\"} : " + f + "\n"
         "  %p = mul(%x, %y) : " + f + "\n"
         "  %g = sum(%p) {axes = [0]} : f32[" + std::to_string(n) + "]\n"
         "  return %g\n}\n";
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

}  // namespace
}  // namespace fusec
