// GEMM plans: how one top-level `matmul` (after gemm-layout, merge-gemms and memory-plan)
// reads its operands and writes its result in place, as a BLAS descriptor. Pure layout math,
// no CUDA: the CPU tests evaluate a plan with a reference loop and compare it with the
// interpreter, so the strides are proven before any GPU runs it (runtime/cublaslt_gemm.h).
//
// Conventions. Every matrix is described in LOGICAL orientation: A is op(a), M x K (the
// transpose flag is folded into its layout), B is op(b), K x N, C is M x N. Element (i, j) of
// a matrix lives at   offset + i*ld + j   (row-major)   or   offset + i + j*ld   (column-major),
// offsets and strides in elements of the storage's dtype. Batches: `batch` GEMMs per launch,
// matrix s at offset + s*batchStride (0: the same matrix for every s, a broadcast operand);
// `launches` holds one (a, b, c) base offset triple per launch. One launch is cuBLASLt's
// strided batch; more than one ("pointer-array mode") happens when the batch dims of some
// operand do not collapse to one stride, e.g. attention's P@V written through
// out_perm [0,2,1,3]: the plan then loops over the outer batch dims and strides the inner ones.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "ir/graph.h"

namespace fusec::rt {

struct GemmMatrix {
  // The value owning the storage: resolveView's base (an arena value, a param or input, or
  // a resident concat; storageOf() maps that to the value whose Value::offset locates it).
  const Value* base = nullptr;
  bool colMajor = false;
  int64_t ld = 0;           // >= the minor dimension's size, >= 1
  int64_t batchStride = 0;  // elements between consecutive matrices of one launch
};

struct GemmPlan {
  int64_t M = 0, N = 0, K = 0;
  int64_t batch = 1;  // matrices per launch
  DType dtype = DType::f32;  // of A, B and C (f32, or bf16 with f32 accumulation)
  bool widenC = false;       // C is f32 though A and B are bf16 (matmul's out_dtype)
  GemmMatrix a, b, c;
  float alpha = 1, beta = 0;
  // Element offsets of A, B, C from their bases, one triple per launch.
  std::vector<std::array<int64_t, 3>> launches;

  int64_t flops() const { return 2 * M * N * K * batch * int64_t(launches.size()); }
  DType cDType() const { return widenC ? DType::f32 : dtype; }
};

// The plan of `mm` (a matmul op). Throws Error when an operand is not GEMM-readable (a view
// that needs a copy), the dtypes differ or are not f32/bf16, or out_perm moves the N axis.
GemmPlan planGemm(const Op& mm);

// The value whose Value::offset gives `base`'s storage: a resident concat (a concat with no
// offset of its own) is a view of its first operand, anything else is itself.
const Value* storageOf(const Value* base);

// Shape of a plan, for caching algorithm choices and counting distinct GEMMs: two plans with
// equal keys run the same cuBLASLt descriptors (offsets and bases aside).
struct GemmShapeKey {
  int64_t M, N, K, batch;
  DType dtype;
  bool widenC;
  bool aCol, bCol;
  int64_t lda, ldb, ldc, sa, sb, sc;
  auto operator<=>(const GemmShapeKey&) const = default;
};
GemmShapeKey shapeKey(const GemmPlan& p);

}  // namespace fusec::rt
