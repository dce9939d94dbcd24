// The embedding gradient (scatter_add along the vocabulary, one id per position) on the GPU,
// for what the model-sized kernel tests do not reach (codegen/scatter_kernel.cpp, `ranged`):
// - a vocabulary of thousands of rows over many blocks, with the first and last rows hit;
// - a token repeated more times than a block lists at once, so a block adds its positions
//   over several rounds (the later ones add to the rows already written);
// - ids outside the vocabulary, including ones that would wrap into it in 32 bits: they
//   add nothing.
// The host reference adds each row's positions in position order from 0, as the kernel
// does, so the results must be bit-identical (f32), and so must a second run.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "api/compile.h"
#include "ir/parser.h"
#include "runtime/device.h"
#include "runtime/executable.h"
#include "test_util.h"

namespace fusec {
namespace {

class ScatterKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  }
};

std::string embeddingGrad(int64_t s, int64_t v, int64_t d) {
  const std::string S = std::to_string(s), V = std::to_string(v), D = std::to_string(d);
  return "func @embedding_grad {\n"
         "  %ids = input() {name = \"ids\"} : i64[" + S + "]\n"
         "  %g = input() {name = \"g\"} : f32[" + S + "," + D + "]\n"
         "  %i2 = reshape(%ids) : i64[" + S + ",1]\n"
         "  %ib = broadcast(%i2) : i64[" + S + "," + D + "]\n"
         "  %z = constant() {value = 0} : f32[" + V + "," + D + "]\n"
         "  %w = scatter_add(%z, %ib, %g) {axis = 0} : f32[" + V + "," + D + "]\n"
         "  return %w\n"
         "}\n";
}

// Row id of the result gets the rows of g whose id is `id`, in position order; other ids drop.
std::vector<float> reference(const std::vector<int64_t>& ids, const HostTensor& g, int64_t v, int64_t d) {
  std::vector<float> w(size_t(v * d), 0.0f);
  for (size_t s = 0; s < ids.size(); ++s)
    if (ids[s] >= 0 && ids[s] < v)
      for (int64_t c = 0; c < d; ++c) w[size_t(ids[s] * d + c)] += g.f[s * size_t(d) + size_t(c)];
  return w;
}

void check(const std::vector<int64_t>& ids, int64_t v, int64_t d, std::mt19937& rng) {
  const int64_t s = int64_t(ids.size());
  auto m = parseModule(embeddingGrad(s, v, d));
  api::lowerProgram(*m, "", {.programPasses = false});
  Bindings env;
  env["ids"] = HostTensor::zeros(Type{DType::i64, {s}});
  env["ids"].i = ids;
  env["g"] = test::randomNonZero(Type{DType::f32, {s, d}}, rng, 2.0);
  const std::vector<float> want = reference(ids, env["g"], v, d);
  rt::Executable exe(*m->funcs.at(0));
  exe.bind(env);
  for (int run = 0; run < 2; ++run) {
    exe.run();
    const HostTensor got = exe.output(0);
    ASSERT_EQ(got.f.size(), want.size());
    size_t differ = 0, first = 0;
    for (size_t k = 0; k < want.size(); ++k)
      if (std::memcmp(&got.f[k], &want[k], sizeof(float)) != 0 && differ++ == 0) first = k;
    EXPECT_EQ(differ, 0u) << "run " << run << ": " << differ << " elements differ, the first at row " << first / size_t(d)
                          << " column " << first % size_t(d) << ": " << got.f[first] << " vs " << want[first];
  }
}

// Small's vocabulary over 264 blocks of 38 rows: uniform ids, the two end rows hit.
TEST_F(ScatterKernels, VocabularyOverManyBlocks) {
  std::mt19937 rng(21);
  std::uniform_int_distribution<int64_t> id(0, 9999);
  std::vector<int64_t> ids(16384);
  for (auto& x : ids) x = id(rng);
  ids[5] = 0, ids[77] = 9999, ids[16383] = 9999;
  check(ids, 10000, 96, rng);
}

// One token at 90% of 20,000 positions: its block lists more than 2048 of them and adds them
// over several rounds; the other rows of that block are written in the first round only.
// Columns past 2048 take two passes per row.
TEST_F(ScatterKernels, RepeatedTokenOverRounds) {
  std::mt19937 rng(22);
  std::uniform_int_distribution<int64_t> id(0, 99);
  std::bernoulli_distribution hot(0.9);
  std::vector<int64_t> ids(20000);
  for (auto& x : ids) x = hot(rng) ? 7 : id(rng);
  check(ids, 100, 40, rng);
  std::vector<int64_t> few(9000);
  for (auto& x : few) x = hot(rng) ? 3 : id(rng) % 37;
  check(few, 37, 2100, rng);
}

// Ids before, past and far past the vocabulary (2^32 + 5 would be row 5 in 32 bits).
TEST_F(ScatterKernels, IdsOutsideTheVocabularyAddNothing) {
  std::mt19937 rng(23);
  std::uniform_int_distribution<int64_t> id(0, 499);
  std::vector<int64_t> ids(3000);
  for (auto& x : ids) x = id(rng);
  const int64_t outside[] = {-1, 500, (int64_t(1) << 32) + 5, -(int64_t(1) << 32) + 5, int64_t(1) << 62, 501};
  for (size_t k = 0; k < std::size(outside); ++k) ids[k * 7] = outside[k];
  check(ids, 500, 33, rng);
}

}  // namespace
}  // namespace fusec
