// cuBLASLt GEMMs: every distinct GEMM plan of tiny and small train_step (fp32 and bf16, whole
// pipeline) on random non-zero storage, output poisoned with NaN first, against the
// interpreter: f32 (strict, no TF32) within 1e-5 norm-wise relative, bf16 within 2e-2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "gemm_reference.h"
#include "runtime/cublaslt_gemm.h"
#include "test_util.h"

namespace fusec {
namespace {

// Host floats (already rounded to `d`) as the device's bytes: bf16 is f32's top half.
std::vector<uint8_t> toDevice(const HostTensor& h) {
  const int eb = dtypeBytes(h.type.dtype);
  std::vector<uint8_t> out(h.size() * size_t(eb));
  for (size_t k = 0; k < h.size(); ++k) {
    uint32_t bits;
    std::memcpy(&bits, &h.f[k], 4);
    if (eb == 2) {
      uint16_t top = uint16_t(bits >> 16);
      std::memcpy(&out[k * 2], &top, 2);
    } else {
      std::memcpy(&out[k * 4], &bits, 4);
    }
  }
  return out;
}

HostTensor fromDevice(const std::vector<uint8_t>& bytes, const Type& t) {
  HostTensor h = HostTensor::zeros(t);
  const int eb = dtypeBytes(t.dtype);
  for (size_t k = 0; k < h.size(); ++k) {
    uint32_t bits = 0;
    if (eb == 2) {
      uint16_t top;
      std::memcpy(&top, &bytes[k * 2], 2);
      bits = uint32_t(top) << 16;
    } else {
      std::memcpy(&bits, &bytes[k * 4], 4);
    }
    std::memcpy(&h.f[k], &bits, 4);
  }
  return h;
}

rt::DeviceBuffer upload(const HostTensor& h) {
  auto bytes = toDevice(h);
  rt::DeviceBuffer d(bytes.size(), "test operand");
  FUSEC_CUDA(cudaMemcpy(d.data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "uploading an operand");
  return d;
}

// Runs a case's plan on the device over uploads of `env`'s storage, the result poisoned with
// NaN first (0xFF bytes are NaN in f32 and bf16), and returns the result (and the algorithm
// choice in `chosen`).
HostTensor runOnDevice(const test::GemmCase& c, const Bindings& env, rt::CublasLtGemm& gemm,
                       rt::GemmTuning* chosen = nullptr) {
  std::vector<rt::DeviceBuffer> bases;
  for (size_t i = 0; i < c.bases.size(); ++i) bases.push_back(upload(env.at("base" + std::to_string(i))));
  auto device = [&](const Value* base) {
    for (size_t i = 0; i < c.bases.size(); ++i)
      if (c.bases[i] == base) return bases[i].data();
    throw Error("internal: a plan base is not an operand's base");
  };
  const Type& ct = c.mm->result()->type;
  const size_t cBytes = size_t(ct.numel()) * size_t(dtypeBytes(ct.dtype));
  rt::DeviceBuffer out(cBytes, "test result");
  FUSEC_CUDA(cudaMemset(out.data(), 0xFF, cBytes), "poisoning the result");
  const std::string what = "matmul " + ct.str();
  const rt::GemmTuning& t = gemm.run(c.plan, device(c.plan.a.base), device(c.plan.b.base), out.data(), nullptr, what);
  if (chosen) *chosen = t;
  FUSEC_CUDA(cudaDeviceSynchronize(), what);
  std::vector<uint8_t> bytes(cBytes);
  FUSEC_CUDA(cudaMemcpy(bytes.data(), out.data(), cBytes, cudaMemcpyDeviceToHost), "downloading the result");
  return fromDevice(bytes, ct);
}

struct ProgramCase {
  const char* model;
  DType dtype;
  int64_t layers, seq;
};
void PrintTo(const ProgramCase& c, std::ostream* os) { *os << c.model << " " << dtypeName(c.dtype); }


class CublasLtGemmProgram : public ::testing::TestWithParam<ProgramCase> {
 protected:
  void SetUp() override {
    std::string why;
    if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
    rt::openDevice();
  }
};

TEST_P(CublasLtGemmProgram, MatchesCpuReference) {
  const ProgramCase& pc = GetParam();
  const double tol = pc.dtype == DType::f32 ? 1e-5 : 2e-2;
  auto m = test::compiledTrainStep(pc.model, pc.dtype, pc.layers, 2, pc.seq);
  rt::CublasLtGemm gemm;
  std::mt19937 rng(11);
  int n = 0;
  double worst = 0;
  for (const auto& c : test::gemmCases(*m->funcs[0], false)) {
    Bindings env = test::randomBases(*c, rng);
    HostTensor want = interpret(*c->sub.funcs[0], env).at(0);
    HostTensor got = runOnDevice(*c, env, gemm);
    const std::string what = "matmul " + c->mm->result()->type.str();
    const double err = test::normRelError(got, want);
    worst = std::max(worst, std::isnan(err) ? 1e30 : err);
    EXPECT_LE(err, tol) << what << " M=" << c->plan.M << " N=" << c->plan.N << " K=" << c->plan.K
                        << " batch=" << c->plan.batch << " launches=" << c->plan.launches.size()
                        << " a.col=" << c->plan.a.colMajor << " b.col=" << c->plan.b.colMajor;
    ++n;
  }
  std::printf("%s %s: %d distinct GEMMs, worst norm-wise relative error %.3g (tolerance %.0e), %zu algorithms cached\n",
              pc.model, std::string(dtypeName(pc.dtype)).c_str(), n, worst, tol, gemm.cachedAlgorithms());
  EXPECT_GT(n, 5);
}

// Autotuned: every candidate is timed on the real operands, the result written by the chosen
// one after them; it must match the reference as the heuristic's does, and the choice must be
// no slower than the heuristic's first algorithm (the times come from the same timing loop).
TEST_P(CublasLtGemmProgram, TunedMatchesCpuReference) {
  const ProgramCase& pc = GetParam();
  const double tol = pc.dtype == DType::f32 ? 1e-5 : 2e-2;
  auto m = test::compiledTrainStep(pc.model, pc.dtype, pc.layers, 2, pc.seq);
  rt::CublasLtGemm gemm(rt::GemmOptions{.autotune = true});
  std::mt19937 rng(12);
  int n = 0, widest = 0, changed = 0;
  for (const auto& c : test::gemmCases(*m->funcs[0], false)) {
    Bindings env = test::randomBases(*c, rng);
    HostTensor want = interpret(*c->sub.funcs[0], env).at(0);
    rt::GemmTuning t;
    HostTensor got = runOnDevice(*c, env, gemm, &t);
    const std::string what = "matmul " + c->mm->result()->type.str();
    EXPECT_LE(test::normRelError(got, want), tol) << what << " with " << t.algoDesc;
    EXPECT_TRUE(t.source == rt::GemmTuning::Source::Tuned || t.source == rt::GemmTuning::Source::Cached) << what;
    EXPECT_GE(t.candidates, 1) << what;
    if (!std::isnan(t.heuristicMs)) {
      EXPECT_LE(t.tunedMs, t.heuristicMs) << what;
    }
    widest = std::max(widest, t.candidates);
    changed += t.tunedMs < t.heuristicMs;
    ++n;
  }
  std::printf("%s %s: %d distinct GEMMs tuned, up to %d candidates, %d faster than the heuristic's first\n", pc.model,
              std::string(dtypeName(pc.dtype)).c_str(), n, widest, changed);
  EXPECT_GT(n, 5);
  EXPECT_GT(widest, 1);
}

INSTANTIATE_TEST_SUITE_P(TrainStep, CublasLtGemmProgram,
                         ::testing::Values(ProgramCase{"tiny", DType::f32, 2, 8}, ProgramCase{"tiny", DType::bf16, 2, 8},
                                           ProgramCase{"small", DType::f32, 2, 64},
                                           ProgramCase{"small", DType::bf16, 2, 64}),
                         [](const auto& info) {
                           return std::string(info.param.model) + "_" + std::string(dtypeName(info.param.dtype));
                         });

// --tf32 really switches the compute type: a K=2048 f32 GEMM is exact to ~1e-7 strict and
// visibly less exact (TF32 keeps 10 mantissa bits) but still close with TF32.
TEST(CublasLtGemm, Tf32IsOptIn) {
  std::string why;
  if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  rt::openDevice();
  test::GraphUnderTest t;
  Value* y = t.b.matmul(t.b.input("x", test::f32({256, 2048})), t.b.param("w", test::f32({512, 2048})), false, true);
  auto c = test::gemmCase(*y->def);
  std::mt19937 rng(5);
  Bindings env = test::randomBases(*c, rng);
  HostTensor want = interpret(*c->sub.funcs[0], env).at(0);
  rt::CublasLtGemm strict, tf32(rt::GemmOptions{.tf32 = true});
  const double eStrict = test::normRelError(runOnDevice(*c, env, strict), want);
  const double eTf32 = test::normRelError(runOnDevice(*c, env, tf32), want);
  std::printf("K=2048 f32 GEMM: strict error %.3g, tf32 error %.3g\n", eStrict, eTf32);
  EXPECT_LE(eStrict, 1e-6);
  EXPECT_GT(eTf32, 1e-5);
  EXPECT_LE(eTf32, 5e-3);
}

}  // namespace
}  // namespace fusec
