// Runs GEMM plans (runtime/gemm_plan.h) on cuBLASLt.
//
// Layout mapping: cuBLASLt is column-major, our C is row-major, so every plan runs as
// C^T = B^T A^T: a row-major matrix with leading dimension ld IS its transpose in column-major
// with the same ld, so a row-major operand passes with CUBLAS_OP_N and a column-major one
// with CUBLAS_OP_T, and A and B swap places. Strided batches go through the layouts' batch
// attributes; a plan with several launches (batch dims that do not flatten to one stride)
// runs as a loop of strided-batch launches on the same stream (no pointer arrays: the loop
// is short, the outer batch dims only, and a CUDA graph captures it like any launch).
//
// Numerics: f32 GEMMs are strict f32 (CUBLAS_COMPUTE_32F, no TF32) unless `tf32` is set
// (CUBLAS_COMPUTE_32F_FAST_TF32); bf16 GEMMs read and write bf16 and accumulate in f32.
//
// Algorithms are chosen once per (shape, operand alignment), at the plan's first run:
//   * autotune off: cuBLASLt's heuristic's first algorithm, as before;
//   * autotune on: the heuristic's top kMaxGemmCandidates algorithms, and the variants
//     widenGemmCandidates adds, are screened (best of two calls each, on the real
//     operands), the heuristic's first and the six fastest are timed again (CUDA events,
//     median of a few calls), and the fastest is kept and
//     recorded in the GemmTuningCache (runtime/gemm_tuning_cache.h), from which a later
//     process loads it instead of timing again (re-checked with cublasLtMatmulAlgoCheck).
//     Timing needs synchronisation, so it never happens under stream capture: a plan first
//     met while capturing gets the heuristic's choice. Plans write C with beta = 0 and C
//     disjoint from A and B, so the timing calls leave C as one call would (the real call
//     follows them); otherwise the candidates are timed on a scratch copy of C.
#pragma once
#include <cstddef>
#include <map>
#include <memory>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "runtime/device.h"
#include "runtime/gemm_plan.h"
#include "runtime/gemm_tuning_cache.h"

namespace fusec::rt {

struct GemmOptions {
  bool tf32 = false;
  size_t workspaceBytes = size_t(32) << 20;  // cuBLASLt's recommendation for Hopper
  bool autotune = false;                     // time the heuristic's candidates at first use
  GemmTuningCache* tuningCache = nullptr;    // autotuned choices (null: this object's own)
};

// cuBLASLt's heuristic is asked for this many algorithms when autotuning, and at most
// kWideGemmVariants configurations it did not offer are added (runtime/gemm_candidates.h).
constexpr int kMaxGemmCandidates = 16;
constexpr int kWideGemmVariants = 48;

class CublasLtGemm {
 public:
  explicit CublasLtGemm(GemmOptions opts = {});
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // Runs `p` with A, B, C stored at the device addresses `a`, `b`, `c` (the storage of the
  // plan's bases; launches add their offsets). `what` names the GEMM in error messages.
  // `sms` > 0 plans it for that many SMs (cuBLASLt's SM count target: others run beside it).
  // Returns the choice made for the plan (stable while this object lives).
  const GemmTuning& run(const GemmPlan& p, const void* a, const void* b, void* c, cudaStream_t stream, const std::string& what,
                        int sms = 0);

  size_t cachedAlgorithms() const { return cache_.size(); }

 private:
  struct Entry;
  Entry& entryFor(const GemmPlan& p, int alignA, int alignB, int alignC, int sms, const std::string& what);
  // Picks e's algorithm at its first run: from the cache, by timing, or the heuristic's.
  void choose(Entry& e, const GemmPlan& p, const void* a, const void* b, void* c, cudaStream_t stream,
              const std::string& what);
  // False when it cannot time (no memory for a scratch C): the caller falls back.
  bool tune(Entry& e, const GemmPlan& p, const void* a, const void* b, void* c, cudaStream_t stream,
            const std::string& what);
  bool stillValid(Entry& e, const std::array<uint64_t, 8>& algo);

  GemmOptions opts_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<std::tuple<GemmShapeKey, int, int, int, int>, std::unique_ptr<Entry>> cache_;
  std::unique_ptr<GemmTuningCache> ownTuning_;  // when opts_.tuningCache is null
  GemmTuningCache* tuning_ = nullptr;
};

}  // namespace fusec::rt
