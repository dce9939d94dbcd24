// fusec's attention programs on the CPU interpreter against LibTorch eager naive causal
// attention (bench/eager_attention.h) on random non-zero q, k, v, grad_out: out, dq, dk, dv,
// traced and compiled, within 1e-5 norm-wise relative; and the reference computed in batch
// chunks equals the whole-batch one (the GPU seed-grid test relies on chunks).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "bench/eager_attention.h"
#include "api/compile.h"
#include "frontend/models/attention.h"
#include "test_util.h"

using namespace fusec;

namespace {

// ||a - b|| / ||b|| (test_util.h), checking the types first.
double relDiff(const HostTensor& a, const HostTensor& b) {
  EXPECT_EQ(a.type, b.type);
  return a.type == b.type ? test::normRelError(a, b) : INFINITY;
}

struct Case {
  int64_t B, N, d;
  Bindings env;
  bench::AttentionResult ref;
};

Case makeCase(int64_t B, int64_t N, int64_t d, uint32_t seed, int64_t chunk = 0) {
  std::mt19937 rng(seed);
  const Type t{DType::f32, {B, N, d}};
  Case c{B, N, d, {}, {}};
  for (const char* n : {"q", "k", "v", "grad_out"}) c.env[n] = test::randomNonZero(t, rng);
  c.ref = bench::eagerAttention(c.env["q"], c.env["k"], c.env["v"], c.env["grad_out"], {"cpu", chunk});
  return c;
}

std::vector<HostTensor> runFusec(const std::string& program, const Case& c, bool compiled) {
  if (compiled) {
    auto m = models::compileAttentionProgram(program, c.B, c.N, c.d);
    return interpret(*m->funcs.at(0), c.env);
  }
  // Traced, then its program passes only (autodiff makes the backward's VJP), unoptimised.
  Module m;
  Graph& g = models::buildAttentionProgram(m, program, c.B, c.N, c.d);
  api::lowerProgram(m, program, {.attention = AttentionLowering::Naive, .passes = std::string()});
  return interpret(g, c.env);
}

TEST(AttentionVsTorch, ForwardAndBackwardMatchEager) {
  double worst = 0;
  for (auto [B, N, d] : {std::tuple<int64_t, int64_t, int64_t>{2, 7, 5}, {3, 33, 16}, {1, 1, 8}, {2, 64, 32}})
    for (bool compiled : {false, true}) {
      Case c = makeCase(B, N, d, uint32_t(N * 100 + d));
      const std::string where = std::string(compiled ? "compiled" : "traced") + " B" + std::to_string(B) + " N" +
                                std::to_string(N) + " d" + std::to_string(d);
      const double out = relDiff(runFusec("attention", c, compiled).at(0), c.ref.out);
      std::vector<HostTensor> g = runFusec("attention_backward", c, compiled);
      ASSERT_EQ(g.size(), 3u);
      const double dq = relDiff(g[0], c.ref.dq), dk = relDiff(g[1], c.ref.dk), dv = relDiff(g[2], c.ref.dv);
      EXPECT_LE(out, 1e-5) << where;
      EXPECT_LE(dq, 1e-5) << where;
      EXPECT_LE(dk, 1e-5) << where;
      EXPECT_LE(dv, 1e-5) << where;
      worst = std::max({worst, out, dq, dk, dv});
    }
  std::printf("attention out, dq, dk, dv vs LibTorch: max relative difference %.3g\n", worst);
}

// The comparison sees a wrong program: the reference of other inputs is far away.
TEST(AttentionVsTorch, ComparisonDetectsOtherInputs) {
  Case c = makeCase(2, 9, 4, 1), other = makeCase(2, 9, 4, 2);
  EXPECT_GT(relDiff(runFusec("attention_backward", c, true).at(0), other.ref.dq), 0.1);
}

TEST(AttentionVsTorch, BatchChunksGiveTheWholeBatchResult) {
  Case whole = makeCase(5, 12, 6, 3), chunked = makeCase(5, 12, 6, 3, /*chunk=*/2);
  EXPECT_LE(relDiff(chunked.ref.out, whole.ref.out), 1e-6);
  EXPECT_LE(relDiff(chunked.ref.dq, whole.ref.dq), 1e-6);
  EXPECT_LE(relDiff(chunked.ref.dk, whole.ref.dk), 1e-6);
  EXPECT_LE(relDiff(chunked.ref.dv, whole.ref.dv), 1e-6);
}

TEST(AttentionVsTorch, ShapeErrorsAreOneLine) {
  const Type t{DType::f32, {1, 2, 3}}, u{DType::f32, {1, 2, 4}};
  HostTensor a = HostTensor::zeros(t), b = HostTensor::zeros(u);
  try {
    bench::eagerAttention(a, a, b, a);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "eager attention: k, v and grad_out must be f32[1,2,3], got f32[1,2,4]");
  }
}

}  // namespace
