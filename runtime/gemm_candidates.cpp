#include "runtime/gemm_candidates.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace fusec::rt {
namespace {

// How many of the heuristic's results the variants are built around.
constexpr size_t kBases = 3;

// Hopper's GEMM kernels use clusters of up to 2x2; wider ones only shrink the grid's choice.
constexpr uint16_t kClusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO, CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1,
                                  CUBLASLT_CLUSTER_SHAPE_1x2x1, CUBLASLT_CLUSTER_SHAPE_2x2x1};
constexpr int32_t kSplits[] = {2, 3, 4, 6, 8, 12, 16};

template <class T>
std::vector<T> capArray(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attr) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS || bytes == 0) return {};
  std::vector<T> v(bytes / sizeof(T));
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, v.data(), v.size() * sizeof(T), &bytes) != CUBLAS_STATUS_SUCCESS)
    return {};
  return v;
}

template <class T>
T capValue(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attr) {
  T v{};
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, &v, sizeof v, &bytes) != CUBLAS_STATUS_SUCCESS) return T{};
  return v;
}

template <class T>
bool set(cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr, T v) {
  return cublasLtMatmulAlgoConfigSetAttribute(&algo, attr, &v, sizeof v) == CUBLAS_STATUS_SUCCESS;
}

// The fraction of the last wave's SMs that have work: 1 when the tiles fill whole waves.
double lastWaveFill(float waves) {
  if (!(waves > 0)) return 0;
  return waves / std::ceil(double(waves));
}

bool sameAlgo(const cublasLtMatmulAlgo_t& x, const cublasLtMatmulAlgo_t& y) {
  return std::memcmp(&x, &y, sizeof x) == 0;
}

}  // namespace

std::vector<cublasLtMatmulHeuristicResult_t> widenGemmCandidates(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
    cublasLtMatrixLayout_t c, const std::vector<cublasLtMatmulHeuristicResult_t>& heuristic, uint64_t maxWorkspace,
    int extra) {
  std::vector<cublasLtMatmulHeuristicResult_t> out = heuristic;
  if (extra <= 0 || heuristic.empty()) return out;
  std::vector<cublasLtMatmulHeuristicResult_t> variants;
  auto known = [&](const cublasLtMatmulAlgo_t& algo) {
    for (const auto& r : out)
      if (sameAlgo(r.algo, algo)) return true;
    for (const auto& r : variants)
      if (sameAlgo(r.algo, algo)) return true;
    return false;
  };
  auto consider = [&](const cublasLtMatmulAlgo_t& algo, float maxWaves) {
    if (known(algo)) return;
    cublasLtMatmulHeuristicResult_t r{};
    if (cublasLtMatmulAlgoCheck(handle, desc, a, b, c, c, &algo, &r) != CUBLAS_STATUS_SUCCESS) return;
    if (r.state != CUBLAS_STATUS_SUCCESS || r.workspaceSize > maxWorkspace) return;
    if (maxWaves > 0 && r.wavesCount > maxWaves) return;
    r.algo = algo;
    variants.push_back(r);
  };

  for (size_t i = 0; i < std::min(kBases, heuristic.size()); ++i) {
    const cublasLtMatmulHeuristicResult_t& base = heuristic[i];
    const float maxWaves = base.wavesCount >= 1 ? 2.0f * base.wavesCount : 2.0f;
    for (const uint32_t tile : capArray<uint32_t>(base.algo, CUBLASLT_ALGO_CAP_TILE_IDS)) {
      if (tile == CUBLASLT_MATMUL_TILE_UNDEFINED) continue;
      for (const uint16_t cluster : kClusters) {
        cublasLtMatmulAlgo_t algo = base.algo;
        if (set(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, tile) && set(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, cluster))
          consider(algo, maxWaves);
      }
    }
    // Few tiles: splitting K gives the idle SMs work (the partial sums are added in a fixed
    // order, so the result does not change from run to run).
    if (base.wavesCount < 2 && capValue<int32_t>(base.algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT)) {
      const uint32_t schemes = capValue<uint32_t>(base.algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
      for (const int32_t split : kSplits)
        for (const uint32_t scheme : {CUBLASLT_REDUCTION_SCHEME_INPLACE, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE,
                                      CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE}) {
          if (!(schemes & scheme)) continue;
          cublasLtMatmulAlgo_t algo = base.algo;
          if (set(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, split) && set(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, scheme))
            consider(algo, 0);
        }
    }
  }
  // Fullest last wave first; among equals, the order found (the heuristic's best base, its
  // tiles in cuBLASLt's order).
  std::stable_sort(variants.begin(), variants.end(), [](const auto& x, const auto& y) {
    return lastWaveFill(x.wavesCount) > lastWaveFill(y.wavesCount) + 1e-3;
  });
  if (variants.size() > size_t(extra)) variants.resize(size_t(extra));
  out.insert(out.end(), variants.begin(), variants.end());
  return out;
}

}  // namespace fusec::rt
