// The cuBLASLt algorithms worth timing for one matmul (runtime/cublaslt_gemm.h times them).
//
// cuBLASLt's heuristic returns a handful of configurations (eight for the bf16 GEMMs of a
// transformer step on Hopper), often one kernel family with a few tiles. Its first choice is
// good for large, square GEMMs and leaves 20-40% on the table where the tile count
// quantises badly against the SM count: K = 768 GEMMs with N = 768 (a 128x128 tile gives
// 5.8 waves) and the weight gradients with a small M x N and K = 16384.
//
// widenGemmCandidates adds, around the heuristic's best few, the configurations it did not
// offer, each accepted by cublasLtMatmulAlgoCheck:
//   * every tile the algorithm supports, at most twice the base's wave count (a much smaller
//     tile is never faster for these shapes), with each cluster shape Hopper's GEMMs use;
//   * split-K counts for GEMMs of few tiles (under two waves), with each reduction scheme
//     the algorithm offers (all of them deterministic: a fixed order of partial sums);
// ranked by how fully their last wave fills the GPU (wavesCount / ceil(wavesCount)), so the
// candidates that fix the quantisation come first. Duplicates of heuristic results and of
// each other are dropped. The result is the heuristic's list followed by at most `extra`
// variants.
#pragma once
#include <cstdint>
#include <vector>

#include <cublasLt.h>

namespace fusec::rt {

std::vector<cublasLtMatmulHeuristicResult_t> widenGemmCandidates(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
    cublasLtMatrixLayout_t c, const std::vector<cublasLtMatmulHeuristicResult_t>& heuristic, uint64_t maxWorkspace,
    int extra);

}  // namespace fusec::rt
