// Row kernels on the GPU, for what the model-sized kernel tests (kernel_test.cpp) do not
// reach: cross-entropy's label logit read as the one element the label selects
// (codegen/reduce_kernels.cpp pickedElement), with labels at and past both ends of the row
// (outside it the select-sum is 0, and so must the pick be), and many rows per group of
// warps. Each against the interpreter on the unoptimised graph. Skips without a device.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "api/compile.h"
#include "ir/interpreter.h"
#include "ir/parser.h"
#include "runtime/device.h"
#include "runtime/executable.h"
#include "test_util.h"

namespace fusec {
namespace {

class RowKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  }
};

std::string shapes(std::string text, int64_t rows, int64_t n, const std::string& dt) {
  auto put = [&](const std::string& key, const std::string& value) {
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
      text.replace(at, key.size(), value);
  };
  const std::string R = std::to_string(rows), N = std::to_string(n);
  put("$X", dt + "[" + R + "," + N + "]");
  put("$F", "f32[" + R + "," + N + "]");
  put("$B", "bool[" + R + "," + N + "]");
  put("$I", "i64[" + R + "," + N + "]");
  put("$T1", "i64[" + R + ",1]");
  put("$T", "i64[" + R + "]");
  put("$ROW1", "f32[" + R + ",1]");
  put("$ROW", "f32[" + R + "]");
  return text;
}

// Cross-entropy per row as decompose writes it (passes/decompose.cpp), with the gradient
// softmax - onehot beside it (the loss kernel of a train step computes both).
std::string crossEntropy(int64_t rows, int64_t n, const std::string& dt) {
  return shapes(R"(func @ce {
  %xi = input() {name = "x"} : $X
  %t = input() {name = "t"} : $T
  %x = cast(%xi) : $F
  %m = reduce_max(%x) {axes = [1], keepdim = true} : $ROW1
  %mb = broadcast(%m) : $F
  %z = sub(%x, %mb) : $F
  %e = exp(%z) : $F
  %s = sum(%e) {axes = [1]} : $ROW
  %l = log(%s) : $ROW
  %io = iota() {axis = 1} : $I
  %tr = reshape(%t) : $T1
  %tb = broadcast(%tr) : $I
  %hot = eq(%io, %tb) : $B
  %zero = constant() {value = 0} : $F
  %pk = select(%hot, %x, %zero) : $F
  %picked = sum(%pk) {axes = [1]} : $ROW
  %mr = reshape(%m) : $ROW
  %ml = add(%mr, %l) : $ROW
  %loss = sub(%ml, %picked) : $ROW
  %sr = reshape(%s) : $ROW1
  %sb = broadcast(%sr) : $F
  %p = div(%e, %sb) : $F
  %one = constant() {value = 1} : $F
  %pm = sub(%p, %one) : $F
  %g = select(%hot, %pm, %p) : $F
  %gx = cast(%g) : $X
  return %loss, %gx
}
)",
                rows, n, dt);
}

// Softmax over rows of n (f32): a warp per row, many rows per group.
std::string softmax(int64_t rows, int64_t n) {
  return shapes(R"(func @softmax {
  %x = input() {name = "x"} : $F
  %m = reduce_max(%x) {axes = [1], keepdim = true} : $ROW1
  %mb = broadcast(%m) : $F
  %z = sub(%x, %mb) : $F
  %e = exp(%z) : $F
  %s = sum(%e) {axes = [1], keepdim = true} : $ROW1
  %sb = broadcast(%s) : $F
  %y = div(%e, %sb) : $F
  return %y
}
)",
                rows, n, "f32");
}

// Optimises `text`, runs it on `env` and compares each output with the interpreter.
void check(const std::string& text, const Bindings& env, double tol) {
  auto m = parseModule(text);
  Graph& g = *m->funcs.at(0);
  const std::vector<HostTensor> want = interpret(g, env);
  api::lowerProgram(*m, "", {.programPasses = false});
  rt::Executable exe(*m->funcs.at(0));
  exe.bind(env);
  exe.run();
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = test::normRelError(exe.output(i), want[i]);
    std::printf("%s output %zu: %.3g\n", g.name.c_str(), i, e);
    EXPECT_LE(e, tol) << g.name << " output " << i;
  }
}

Bindings ceInputs(int64_t rows, int64_t n, DType dt, std::mt19937& rng) {
  Bindings env;
  env["x"] = test::randomNonZero(Type{dt, {rows, n}}, rng, 4.0);
  HostTensor t = HostTensor::zeros(Type{DType::i64, {rows}});
  std::uniform_int_distribution<int64_t> label(0, n - 1);
  const int64_t edges[] = {-1, n, 0, n - 1, -1000000007LL, int64_t(1) << 40};
  for (int64_t r = 0; r < rows; ++r) t.i[size_t(r)] = r < 6 ? edges[r] : label(rng);
  env["t"] = t;
  return env;
}

// Small's vocabulary (rows of 10000 at 512 threads) and a short row (a warp per row); row
// counts that are not a multiple of the groups. Labels outside the row give the loss
// m + log(sum exp) and a gradient without the -1.
TEST_F(RowKernels, CrossEntropyPicksTheLabelLogit) {
  std::mt19937 rng(11);
  check(crossEntropy(3001, 10000, "bf16"), ceInputs(3001, 10000, DType::bf16, rng), 1e-2);
  check(crossEntropy(517, 10000, "f32"), ceInputs(517, 10000, DType::f32, rng), 1e-5);
  check(crossEntropy(4099, 24, "f32"), ceInputs(4099, 24, DType::f32, rng), 1e-5);
}

// GPT-2's vocabulary: rows of 50,304, 98 logits a thread of 512, too long for registers.
// Staged once in shared memory by default (codegen/reduce_kernels.cpp RowRegisters::shared;
// FUSEC_ROW_SHARED=0 streams it from memory in every pass; 106 KB a block, so
// the grid holds two blocks an SM and 601 rows loop over it). Both against the interpreter,
// labels outside the row among them; f32 logits (twice the bytes) stream in both; and a
// softmax over f32 rows of 20,000, staged as f32.
TEST_F(RowKernels, CrossEntropyOverAGpt2Vocabulary) {
  for (const char* shared : {"0", "1"}) {
    test::ScopedEnv choice("FUSEC_ROW_SHARED", shared);
    std::mt19937 rng(23);
    std::printf("FUSEC_ROW_SHARED=%s\n", shared);
    check(crossEntropy(601, 50304, "bf16"), ceInputs(601, 50304, DType::bf16, rng), 1e-2);
    check(crossEntropy(67, 50304, "f32"), ceInputs(67, 50304, DType::f32, rng), 1e-5);
    // f32 rows of 20,000 (80 KB): too long for registers, staged unpacked (4-word chunks).
    Bindings env;
    env["x"] = test::randomNonZero(Type{DType::f32, {301, 20000}}, rng, 4.0);
    check(softmax(301, 20000), env, 1e-5);
  }
}

// 100,003 rows of 64: a grid of more blocks than any device holds at once, its last block
// partly empty.
TEST_F(RowKernels, ManyRowsPerGroup) {
  std::mt19937 rng(12);
  Bindings env;
  env["x"] = test::randomNonZero(Type{DType::f32, {100003, 64}}, rng, 3.0);
  check(softmax(100003, 64), env, 1e-5);
}

}  // namespace
}  // namespace fusec
