// The embedding gradient (scatter_add along the vocabulary, one id per position) on the GPU,
// for what the model-sized kernel tests do not reach (codegen/scatter_kernel.cpp, `ranged`):
// - a vocabulary of thousands of rows over many blocks, with the first and last rows hit;
// - a token repeated more times than a block lists at once, so a block adds its positions
//   over several rounds (the later ones add to the rows already written);
// - ids outside the vocabulary, including ones that would wrap into it in 32 bits: they
//   add nothing.
// The host reference adds each row's positions in position order from 0, as the kernel
// does (a row of more than codegen::scatterRowSegment positions in segments of that many,
// then the segments' sums in order, where every position fits the kernel's list), so the
// results must be bit-identical (f32), and so must a second run.
// - with the param's update as the epilogue (fusion/plan.cpp: the gradient never stored),
//   every position of a block in one list: the update's three outputs against the host's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "api/compile.h"
#include "codegen/family_emitters.h"
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
// With every position in the kernel's list (at most 16,384), a row of more than `segment`
// positions is the sum, in order, of its segments' sums.
std::vector<float> reference(const std::vector<int64_t>& ids, const HostTensor& g, int64_t v, int64_t d) {
  const int64_t segment = ids.size() <= 16384 ? codegen::scatterRowSegment(d) : int64_t(ids.size()) + 1;
  auto positions = std::vector<std::vector<size_t>>(size_t(v));
  for (size_t s = 0; s < ids.size(); ++s)
    if (ids[s] >= 0 && ids[s] < v) positions[size_t(ids[s])].push_back(s);
  std::vector<float> w(size_t(v * d), 0.0f);
  for (int64_t r = 0; r < v; ++r) {
    const auto& ps = positions[size_t(r)];
    const bool inSegments = int64_t(ps.size()) > segment;
    for (int64_t c = 0; c < d; ++c) {
      float total = 0.0f, part = 0.0f;
      for (size_t k = 0; k < ps.size(); ++k) {
        (inSegments ? part : total) += g.f[ps[k] * size_t(d) + size_t(c)];
        if (inSegments && ((int64_t(k) + 1) % segment == 0 || k + 1 == ps.size())) total += part, part = 0.0f;
      }
      w[size_t(r * d + c)] = total;
    }
  }
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
// Then 9,000 positions, which fit the list: the token's row is summed in segments over
// several warps, and each block owns one 124-column slice of its rows.
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

// An AdamW-shaped update of the table's param, which fuse makes the scatter kernel's
// epilogue: p, m and v are updated from the gradient's sums in registers.
std::string embeddingUpdate(int64_t s, int64_t v, int64_t d) {
  const std::string S = std::to_string(s), T = "f32[" + std::to_string(v) + "," + std::to_string(d) + "]";
  return "func @embedding_update {\n"
         "  %lr = input() {name = \"lr\"} : f32[]\n"
         "  %ids = input() {name = \"ids\"} : i64[" + S + "]\n"
         "  %g = input() {name = \"g\"} : f32[" + S + "," + std::to_string(d) + "]\n"
         "  %p = param() {name = \"emb\"} : " + T + "\n"
         "  %m = param() {name = \"emb.exp_avg\", role = \"exp_avg\", of = \"emb\"} : " + T + "\n"
         "  %v = param() {name = \"emb.exp_avg_sq\", role = \"exp_avg_sq\", of = \"emb\"} : " + T + "\n"
         "  %i2 = reshape(%ids) : i64[" + S + ",1]\n"
         "  %ib = broadcast(%i2) : i64[" + S + "," + std::to_string(d) + "]\n"
         "  %z = constant() {value = 0} : " + T + "\n"
         "  %w = scatter_add(%z, %ib, %g) {axis = 0} : " + T + "\n"
         "  %b1 = constant() {value = 0.9} : " + T + "\n"
         "  %mm = mul(%m, %b1) : " + T + "\n"
         "  %c1 = constant() {value = 0.1} : " + T + "\n"
         "  %gm = mul(%w, %c1) : " + T + "\n"
         "  %mn = add(%mm, %gm) : " + T + "\n"
         "  %b2 = constant() {value = 0.999} : " + T + "\n"
         "  %vv = mul(%v, %b2) : " + T + "\n"
         "  %ww = mul(%w, %w) : " + T + "\n"
         "  %c2 = constant() {value = 0.001} : " + T + "\n"
         "  %gv = mul(%ww, %c2) : " + T + "\n"
         "  %vn = add(%vv, %gv) : " + T + "\n"
         "  %rt = sqrt(%vn) : " + T + "\n"
         "  %eps = constant() {value = 1e-08} : " + T + "\n"
         "  %den = add(%rt, %eps) : " + T + "\n"
         "  %dir = div(%mn, %den) : " + T + "\n"
         "  %lrb = broadcast(%lr) : " + T + "\n"
         "  %u = mul(%dir, %lrb) : " + T + "\n"
         "  %pn = sub(%p, %u) : " + T + "\n"
         "  return %pn -> \"emb\", %mn -> \"emb.exp_avg\", %vn -> \"emb.exp_avg_sq\"\n"
         "}\n";
}

void checkUpdate(const std::vector<int64_t>& ids, int64_t v, int64_t d, std::mt19937& rng) {
  const int64_t s = int64_t(ids.size());
  auto m = parseModule(embeddingUpdate(s, v, d));
  api::lowerProgram(*m, "", {.programPasses = false});
  // One kernel: the scatter with the update as its epilogue.
  int kernels = 0;
  for (auto& op : m->funcs.at(0)->ops)
    if (op->kind == OpKind::Kernel) {
      ++kernels;
      EXPECT_NE(op->attrStr("name").find("scatter_"), std::string::npos) << op->attrStr("name");
    }
  EXPECT_EQ(kernels, 1);
  const Type table{DType::f32, {v, d}};
  Bindings env;
  env["lr"] = HostTensor::zeros(Type{DType::f32, {}});
  env["lr"].f[0] = 0.01f;
  env["ids"] = HostTensor::zeros(Type{DType::i64, {s}});
  env["ids"].i = ids;
  env["g"] = test::randomNonZero(Type{DType::f32, {s, d}}, rng, 2.0);
  env["emb"] = test::randomNonZero(table, rng, 1.0);
  env["emb.exp_avg"] = test::randomNonZero(table, rng, 0.1);
  HostTensor sq = test::randomNonZero(table, rng, 0.01);
  for (float& x : sq.f) x = x * x;  // a second moment is not negative
  env["emb.exp_avg_sq"] = sq;
  const std::vector<float> grad = reference(ids, env["g"], v, d);
  std::vector<double> wantP(grad.size()), wantM(grad.size()), wantV(grad.size());
  for (size_t k = 0; k < grad.size(); ++k) {
    const double g = grad[k];
    wantM[k] = 0.9 * env["emb.exp_avg"].f[k] + 0.1 * g;
    wantV[k] = 0.999 * sq.f[k] + 0.001 * g * g;
    wantP[k] = env["emb"].f[k] - 0.01 * wantM[k] / (std::sqrt(wantV[k]) + 1e-8);
  }
  rt::Executable exe(*m->funcs.at(0));
  std::vector<HostTensor> first;
  for (int run = 0; run < 2; ++run) {
    exe.bind(env);  // the update is in place: the same state each run
    exe.run();
    std::vector<HostTensor> got;
    for (size_t o = 0; o < 3; ++o) got.push_back(exe.output(o));
    const std::vector<double>* want[] = {&wantP, &wantM, &wantV};
    for (size_t o = 0; o < 3; ++o) {
      ASSERT_EQ(got[o].f.size(), grad.size());
      size_t bad = 0, at = 0;
      for (size_t k = 0; k < grad.size(); ++k)
        if (std::abs(got[o].f[k] - (*want[o])[k]) > 1e-5 * std::abs((*want[o])[k]) + 1e-7 && bad++ == 0) at = k;
      EXPECT_EQ(bad, 0u) << "output " << o << ", run " << run << ": " << bad << " elements off, the first at row "
                         << at / size_t(d) << " column " << at % size_t(d) << ": " << got[o].f[at] << " vs "
                         << (*want[o])[at];
    }
    if (run == 0) first = got;
    else
      for (size_t o = 0; o < 3; ++o)
        EXPECT_EQ(std::memcmp(first[o].f.data(), got[o].f.data(), got[o].f.size() * sizeof(float)), 0)
            << "output " << o << " differs between runs";
  }
}

// Small at batch 64: 16,384 positions (the most the list holds) over 10,000 rows, uniform;
// then one token at 90% of them, so one block lists nearly every position; ids outside the
// vocabulary add nothing to any row's update.
TEST_F(ScatterKernels, UpdateAsTheEpilogue) {
  std::mt19937 rng(24);
  std::uniform_int_distribution<int64_t> id(0, 9999);
  std::vector<int64_t> ids(16384);
  for (auto& x : ids) x = id(rng);
  ids[3] = 0, ids[9] = 9999;
  checkUpdate(ids, 10000, 200, rng);
  std::bernoulli_distribution hot(0.9);
  for (auto& x : ids) x = hot(rng) ? 4321 : id(rng);
  ids[11] = -1, ids[12] = 10000, ids[13] = (int64_t(1) << 32) + 7;
  checkUpdate(ids, 10000, 200, rng);
}

}  // namespace
}  // namespace fusec
