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
// The heuristic's algorithm is chosen once per (shape, operand alignment) and cached.
#pragma once
#include <cstddef>
#include <map>
#include <memory>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "runtime/device.h"
#include "runtime/gemm_plan.h"

namespace fusec::rt {

struct GemmOptions {
  bool tf32 = false;
  size_t workspaceBytes = size_t(32) << 20;  // cuBLASLt's recommendation for Hopper
};

class CublasLtGemm {
 public:
  explicit CublasLtGemm(GemmOptions opts = {});
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // Runs `p` with A, B, C stored at the device addresses `a`, `b`, `c` (the storage of the
  // plan's bases; launches add their offsets). `what` names the GEMM in error messages.
  void run(const GemmPlan& p, const void* a, const void* b, void* c, cudaStream_t stream, const std::string& what);

  size_t cachedAlgorithms() const { return cache_.size(); }

 private:
  struct Entry;
  Entry& entryFor(const GemmPlan& p, int alignA, int alignB, int alignC, const std::string& what);

  GemmOptions opts_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<std::tuple<GemmShapeKey, int, int, int>, std::unique_ptr<Entry>> cache_;
};

}  // namespace fusec::rt
