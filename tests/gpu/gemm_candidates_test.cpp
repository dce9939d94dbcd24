// The widened GEMM search (runtime/gemm_candidates.h): the heuristic's list comes first,
// unchanged; the variants are distinct, accepted by cublasLtMatmulAlgoCheck within the
// workspace; a GEMM of few tiles gets split-K variants; and every candidate, run on random
// bf16 operands, matches a host reference within bf16's tolerance (a variant the tuner could
// pick must never be a wrong answer), and gives the same bits on a second run. Skips without
// a device.
#include <gtest/gtest.h>

#include <cublasLt.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/gemm_candidates.h"

namespace fusec {
namespace {

void ok(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": " + cublasLtGetStatusString(s));
}

uint16_t toBf16(float x) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float fromBf16(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

std::string words(const cublasLtMatmulAlgo_t& a) { return std::string(reinterpret_cast<const char*>(&a), sizeof a); }

int32_t splitOf(const cublasLtMatmulAlgo_t& a) {
  int32_t v = 1;
  size_t n = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &v, sizeof v, &n);
  return v;
}

TEST(GemmCandidates, WidenedListIsValidDistinctAndCorrect) {
  std::string why;
  if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  rt::openDevice();
  // Column-major C (M x N) = A (M x K) * B (K x N), bf16 in and out, f32 accumulation. 2 x 2
  // tiles of 128: under one wave, so split-K variants must appear.
  const int M = 256, N = 192, K = 4096;
  cublasLtHandle_t h = nullptr;
  ok(cublasLtCreate(&h), "cublasLtCreate");
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  ok(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
  ok(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, M, K, M), "layout A");
  ok(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, N, K), "layout B");
  ok(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, M, N, M), "layout C");
  const uint64_t ws = uint64_t(32) << 20;
  cublasLtMatmulPreference_t pref = nullptr;
  ok(cublasLtMatmulPreferenceCreate(&pref), "preference");
  ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), "workspace");
  std::vector<cublasLtMatmulHeuristicResult_t> found(16);
  int n = 0;
  ok(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 16, found.data(), &n), "heuristic");
  cublasLtMatmulPreferenceDestroy(pref);
  ASSERT_GT(n, 0);
  found.resize(size_t(n));

  const auto all = rt::widenGemmCandidates(h, desc, la, lb, lc, found, ws, 48);
  ASSERT_GE(all.size(), found.size());
  EXPECT_LE(all.size(), found.size() + 48);
  EXPECT_GT(all.size(), found.size()) << "no variant beyond the heuristic's " << n;
  for (size_t i = 0; i < found.size(); ++i) EXPECT_EQ(words(all[i].algo), words(found[i].algo)) << "heuristic result " << i;
  std::set<std::string> seen;
  int splits = 0;
  for (size_t i = found.size(); i < all.size(); ++i) {
    EXPECT_TRUE(seen.insert(words(all[i].algo)).second) << "duplicate variant " << i;
    for (const auto& f : found) EXPECT_NE(words(all[i].algo), words(f.algo)) << "variant " << i << " repeats the heuristic";
    cublasLtMatmulHeuristicResult_t r{};
    EXPECT_EQ(cublasLtMatmulAlgoCheck(h, desc, la, lb, lc, lc, &all[i].algo, &r), CUBLAS_STATUS_SUCCESS) << "variant " << i;
    EXPECT_LE(r.workspaceSize, ws);
    splits += splitOf(all[i].algo) > 1;
  }
  EXPECT_GT(splits, 0) << "a GEMM of 4 tiles got no split-K variant";

  // Random operands (never zeros), the host reference from the same bf16 values.
  std::mt19937 rng{11};
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint16_t> A(size_t(M) * K), B(size_t(K) * N);
  for (auto& x : A) x = toBf16(u(rng));
  for (auto& x : B) x = toBf16(u(rng));
  std::vector<double> want(size_t(M) * N, 0.0);
  for (int j = 0; j < N; ++j)
    for (int k = 0; k < K; ++k) {
      const double b = fromBf16(B[size_t(j) * K + size_t(k)]);
      for (int i = 0; i < M; ++i) want[size_t(j) * M + size_t(i)] += double(fromBf16(A[size_t(k) * M + size_t(i)])) * b;
    }
  rt::DeviceBuffer dA(A.size() * 2, "A"), dB(B.size() * 2, "B"), dC(want.size() * 2, "C"), dW(ws, "workspace");
  FUSEC_CUDA(cudaMemcpy(dA.data(), A.data(), A.size() * 2, cudaMemcpyHostToDevice), "A");
  FUSEC_CUDA(cudaMemcpy(dB.data(), B.data(), B.size() * 2, cudaMemcpyHostToDevice), "B");
  const float alpha = 1, beta = 0;
  std::vector<uint16_t> got(want.size()), again(want.size());
  auto run = [&](const cublasLtMatmulAlgo_t& algo, std::vector<uint16_t>& out) {
    FUSEC_CUDA(cudaMemset(dC.data(), 0xFF, out.size() * 2), "poison");  // NaN in bf16
    const cublasStatus_t s = cublasLtMatmul(h, desc, &alpha, dA.data(), la, dB.data(), lb, &beta, dC.data(), lc,
                                            dC.data(), lc, &algo, dW.data(), ws, nullptr);
    FUSEC_CUDA(cudaDeviceSynchronize(), "GEMM");
    FUSEC_CUDA(cudaMemcpy(out.data(), dC.data(), out.size() * 2, cudaMemcpyDeviceToHost), "C");
    return s;
  };
  for (size_t i = 0; i < all.size(); ++i) {
    if (run(all[i].algo, got) != CUBLAS_STATUS_SUCCESS) continue;  // the tuner skips these too
    double err = 0, norm = 0;
    for (size_t k = 0; k < want.size(); ++k) {
      const double d = double(fromBf16(got[k])) - want[k];
      err += d * d;
      norm += want[k] * want[k];
    }
    EXPECT_LE(std::sqrt(err / norm), 1e-2) << "candidate " << i << " (split-k " << splitOf(all[i].algo) << ")";
    ASSERT_EQ(run(all[i].algo, again), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(got, again) << "candidate " << i << " is not deterministic";
  }
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(h);
}

}  // namespace
}  // namespace fusec
