// The attention programs (frontend/models/attention.h) on the CPU interpreter:
// attention_backward's dq, dk, dv against central finite differences of an independent
// double-precision naive attention; both programs compiled through the whole pipeline against
// their traced form; the compiled backward's shape (5 GEMMs, 2 row kernels, no P v GEMM).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include "api/compile.h"
#include "frontend/models/attention.h"
#include "ir/roles.h"
#include "ir/interpreter.h"
#include "ir/verifier.h"
#include "passes/launch_stats.h"
#include "passes/pipeline.h"
#include "test_util.h"

namespace fusec {
namespace {

using test::f32;

struct Shape3 {
  int64_t B, N, d;
};

Bindings randomQkv(const Shape3& s, bool withGrad, uint32_t seed) {
  std::mt19937 rng(seed);
  const Type t = f32({s.B, s.N, s.d});
  Bindings env;
  for (const char* n : {"q", "k", "v"}) env[n] = test::randomNonZero(t, rng);
  if (withGrad) env["grad_out"] = test::randomNonZero(t, rng);
  return env;
}

// sum(out * g) for naive causal attention in double: the finite-difference oracle.
double lossInDouble(const Shape3& s, const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v, const std::vector<double>& g) {
  double loss = 0;
  const double scale = 1 / std::sqrt(double(s.d));
  std::vector<double> p(size_t(s.N));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t i = 0; i < s.N; ++i) {
      auto at = [&](const std::vector<double>& x, int64_t row, int64_t c) { return x[size_t((b * s.N + row) * s.d + c)]; };
      double mx = -std::numeric_limits<double>::infinity(), den = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < s.d; ++c) dot += at(q, i, c) * at(k, j, c);
        p[size_t(j)] = dot * scale;
        mx = std::max(mx, p[size_t(j)]);
      }
      for (int64_t j = 0; j <= i; ++j) den += (p[size_t(j)] = std::exp(p[size_t(j)] - mx));
      for (int64_t c = 0; c < s.d; ++c) {
        double o = 0;
        for (int64_t j = 0; j <= i; ++j) o += p[size_t(j)] / den * at(v, j, c);
        loss += o * at(g, i, c);
      }
    }
  return loss;
}

std::vector<double> toDouble(const HostTensor& t) { return std::vector<double>(t.f.begin(), t.f.end()); }

// d loss / d x for x = q, k, v by central differences (h = 1e-5 in double: error ~1e-10).
std::vector<HostTensor> finiteDifferenceGrads(const Shape3& s, const Bindings& env) {
  std::vector<std::vector<double>> x = {toDouble(env.at("q")), toDouble(env.at("k")), toDouble(env.at("v"))};
  const std::vector<double> g = toDouble(env.at("grad_out"));
  const double h = 1e-5;
  std::vector<HostTensor> grads;
  for (size_t w = 0; w < 3; ++w) {
    HostTensor d = HostTensor::zeros(env.at("q").type);
    for (size_t e = 0; e < x[w].size(); ++e) {
      const double keep = x[w][e];
      x[w][e] = keep + h;
      const double up = lossInDouble(s, x[0], x[1], x[2], g);
      x[w][e] = keep - h;
      const double down = lossInDouble(s, x[0], x[1], x[2], g);
      x[w][e] = keep;
      d.set(e, (up - down) / (2 * h));
    }
    grads.push_back(std::move(d));
  }
  return grads;
}

// The traced program through its program passes only (f32, naive: autodiff makes the
// backward's VJP over decompose-attention's primitives), on the interpreter.
std::vector<HostTensor> runTraced(const std::string& program, const Shape3& s, const Bindings& env) {
  Module m;
  Graph& g = models::buildAttentionProgram(m, program, s.B, s.N, s.d);
  verify(m);
  api::lowerProgram(m, program, {.attention = AttentionLowering::Naive, .passes = std::string()});
  return interpret(g, env);
}

TEST(AttentionProgram, BackwardMatchesFiniteDifferences) {
  double worst = 0;
  for (Shape3 s : {Shape3{2, 5, 3}, Shape3{1, 1, 4}, Shape3{3, 7, 2}}) {
    Bindings env = randomQkv(s, /*withGrad=*/true, uint32_t(s.N * 10 + s.d));
    std::vector<HostTensor> got = runTraced("attention_backward", s, env);
    ASSERT_EQ(got.size(), 3u);
    std::vector<HostTensor> want = finiteDifferenceGrads(s, env);
    const char* names[] = {"dq", "dk", "dv"};
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_EQ(got[i].type, env.at("q").type);
      const double e = test::normRelError(got[i], want[i]);
      EXPECT_LT(e, 1e-5) << names[i] << " B" << s.B << " N" << s.N << " d" << s.d;
      worst = std::max(worst, e);
    }
  }
  std::printf("dq, dk, dv vs finite differences: max relative error %.3g\n", worst);
}

// Sharp enough to see a wrong gradient: the first query sees only key 0, so dq of row 0 is
// zero, and swapping dk and dv breaks the comparison by far.
TEST(AttentionProgram, FiniteDifferenceCheckDetectsSwappedGradients) {
  const Shape3 s{2, 5, 3};
  Bindings env = randomQkv(s, true, 7);
  std::vector<HostTensor> got = runTraced("attention_backward", s, env);
  std::vector<HostTensor> want = finiteDifferenceGrads(s, env);
  EXPECT_GT(test::normRelError(got[1], want[2]), 0.1);
  for (int64_t c = 0; c < s.d; ++c) EXPECT_EQ(got[0].f[size_t(c)], 0.0f);
}

TEST(AttentionProgram, CompiledMatchesTraced) {
  for (const std::string& program : models::attentionProgramNames())
    for (Shape3 s : {Shape3{3, 7, 5}, Shape3{2, 1, 3}, Shape3{1, 16, 8}}) {
      Bindings env = randomQkv(s, program == "attention_backward", uint32_t(s.N + s.d));
      std::vector<HostTensor> want = runTraced(program, s, env);
      auto m = models::compileAttentionProgram(program, s.B, s.N, s.d);
      std::vector<HostTensor> got = interpret(*m->funcs.at(0), env);
      ASSERT_EQ(got.size(), want.size()) << program;
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_LT(test::normRelError(got[i], want[i]), 1e-6) << program << " output " << i << " N" << s.N;
    }
}

// The backward recomputes S and P (it stands alone), reads no saved P and does not compute
// out = P v: q k^T, P^T dO, dO v^T, dS k, dS^T q, one softmax kernel and one dS kernel.
TEST(AttentionProgram, CompiledBackwardIsFiveGemmsAndTwoRowKernels) {
  auto m = models::compileAttentionProgram("attention_backward", 8, 64, 16);
  const Graph& g = *m->funcs.at(0);
  LaunchStats ls = launchStats(g);
  EXPECT_EQ(ls.gemms, 5);
  EXPECT_EQ(ls.kernels, 2);
  ASSERT_EQ(g.outputs.size(), 3u);
  EXPECT_EQ(g.outputs[0]->name, "dq");
  EXPECT_EQ(g.outputs[1]->name, "dk");
  EXPECT_EQ(g.outputs[2]->name, "dv");
  auto fwd = models::compileAttentionProgram("attention", 8, 64, 16);
  LaunchStats lf = launchStats(*fwd->funcs.at(0));
  EXPECT_EQ(lf.gemms, 2);
  EXPECT_EQ(lf.kernels, 1);
}

// The traced backward is the forward with a cotangent input: no pass ran in the frontend.
TEST(AttentionProgram, TracedBackwardIsTheForwardWithACotangent) {
  Module m;
  Graph& g = models::buildAttentionProgram(m, "attention_backward", 2, 8, 4);
  ASSERT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(g.outputs[0]->def->kind, OpKind::Attention);
  const Op* cot = findInputByRole(g, Role::Cotangent);
  ASSERT_NE(cot, nullptr);
  EXPECT_EQ(cot->attrStr("name"), "grad_out");
}

// bf16 works naive too now that autocast runs before autodiff: dq, dk, dv within the bf16
// bounds of the f32 program, in the inputs' dtype (f32, as PyTorch autocast's gradients).
TEST(AttentionProgram, Bf16BackwardNaiveAndFused) {
  const Shape3 s{2, 7, 4};
  Bindings env = randomQkv(s, true, 5);
  std::vector<HostTensor> want = runTraced("attention_backward", s, env);
  for (AttentionLowering l : {AttentionLowering::Naive, AttentionLowering::Fused}) {
    auto m = models::compileAttentionProgram("attention_backward", s.B, s.N, s.d, l, DType::bf16);
    std::vector<HostTensor> got = interpret(*m->funcs.at(0), env);
    ASSERT_EQ(got.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(got[i].type, env.at("q").type);
      EXPECT_LT(test::normRelError(got[i], want[i]), 2e-2) << attentionLoweringName(l) << " output " << i;
    }
  }
}

// With bf16 inputs (what `fusec bench attention --dtype bf16` times, as SDPA is handed bf16
// tensors) a bf16 program has no cast kernel, and computes what the f32-input program does on
// the same bf16 values: its gradients are that program's, rounded to bf16.
TEST(AttentionProgram, Bf16InputsNeedNoCasts) {
  const Shape3 s{2, 7, 4};
  Bindings env = randomQkv(s, true, 6);
  for (auto& [name, t] : env)
    for (float& x : t.f) x = roundToDType(x, DType::bf16);  // values both programs read exactly
  for (AttentionLowering l : {AttentionLowering::Naive, AttentionLowering::Fused})
    for (const char* program : {"attention", "attention_backward"}) {
      SCOPED_TRACE(std::string(program) + ", " + std::string(attentionLoweringName(l)));
      auto f32In = models::compileAttentionProgram(program, s.B, s.N, s.d, l, DType::bf16);
      auto bf16In = models::compileAttentionProgram(program, s.B, s.N, s.d, l, DType::bf16, DType::bf16);
      const Graph& g = *bf16In->funcs.at(0);
      for (const Op* in : g.inputs()) EXPECT_EQ(in->result()->type.dtype, DType::bf16) << in->attrStr("name");
      for (const auto& op : g.ops)
        if (op->kind == OpKind::Kernel) {
          EXPECT_NE(op->attrStr("hint"), "cast") << op->attrStr("name");
        }
      Bindings asBf16 = env;  // the same values, typed as the bf16 program's inputs
      for (auto& [name, t] : asBf16) t.type.dtype = DType::bf16;
      const std::vector<HostTensor> want = interpret(*f32In->funcs.at(0), env), got = interpret(g, asBf16);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].type.dtype, DType::bf16);
        ASSERT_EQ(got[i].size(), want[i].size());
        for (size_t k = 0; k < got[i].size(); ++k)
          ASSERT_EQ(got[i].f[k], roundToDType(want[i].f[k], DType::bf16)) << "output " << i << " element " << k;
      }
    }
  Module m;
  EXPECT_EQ(test::errorOf([&] { models::buildAttention(m, 1, 2, 4, DType::i32); }), "attention inputs must be f32 or bf16, got i32");
}

TEST(AttentionProgram, Errors) {
  EXPECT_NO_THROW(programPassNames("attention_backward", DType::bf16));
  EXPECT_NO_THROW(programPassNames("attention_backward", DType::bf16, AttentionLowering::Fused));
  EXPECT_EQ(test::errorOf([] { programPassNames("attention_fwd", DType::f32); }),
            "unknown program 'attention_fwd' (known: forward, train_step, attention, attention_backward)");
  Module m;
  EXPECT_EQ(test::errorOf([&] { models::buildAttentionProgram(m, "backward", 1, 1, 1); }),
            "unknown attention program 'backward' (known: attention, attention_backward)");
  EXPECT_EQ(test::errorOf([&] { models::buildAttentionBackward(m, 8, 0, 64); }),
            "attention sizes must be positive, got batch 8, seq 0, d 64");
}

TEST(AttentionProgram, SavedForBackwardIsTheProbabilities) {
  // The seeds' number: B 8, N 16384, f32 -> 8 GiB.
  EXPECT_EQ(models::savedForBackwardBytes(8, 16384), int64_t(8) << 30);
  EXPECT_EQ(models::savedForBackwardBytes(2, 3, 2), 2 * 3 * 3 * 2);
}

}  // namespace
}  // namespace fusec
