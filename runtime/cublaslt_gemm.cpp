#include "runtime/cublaslt_gemm.h"

#include <cstdint>
#include <string>

namespace fusec::rt {
namespace {

void ltCheck(cublasStatus_t s, const char* call, const std::string& what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw Error(std::string("CUDA ") + call + " failed in " + what + ": " + cublasLtGetStatusString(s));
}
#define FUSEC_LT(call, what) ltCheck((call), #call, (what))

cudaDataType_t dataType(DType d) { return d == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F; }

// The largest power of two, at most 256 (cuBLASLt's default assumption), dividing every
// byte address a plan's operand takes: its launches' pointers and its batch stride.
int alignmentOf(const void* base, const GemmPlan& p, int which, int64_t batchStride) {
  const int64_t eb = dtypeBytes(p.dtype);
  uint64_t bits = 256;
  for (const auto& l : p.launches) bits |= uintptr_t(base) + uint64_t(l[size_t(which)] * eb);
  if (p.batch > 1) bits |= uint64_t(batchStride * eb);
  return int(bits & (~bits + 1));
}

}  // namespace

struct CublasLtGemm::Entry {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A, B, C(=D)
  cublasLtMatmulAlgo_t algo{};
  ~Entry() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

CublasLtGemm::CublasLtGemm(GemmOptions opts) : opts_(opts) {
  FUSEC_LT(cublasLtCreate(&handle_), "creating the cuBLASLt handle");
  workspace_ = DeviceBuffer(opts_.workspaceBytes, "cuBLASLt workspace");
}

CublasLtGemm::~CublasLtGemm() {
  cache_.clear();
  if (handle_) cublasLtDestroy(handle_);
}

CublasLtGemm::Entry& CublasLtGemm::entryFor(const GemmPlan& p, int alignA, int alignB, int alignC,
                                            const std::string& what) {
  auto key = std::make_tuple(shapeKey(p), alignA, alignB, alignC);
  if (auto it = cache_.find(key); it != cache_.end()) return *it->second;
  auto e = std::make_unique<Entry>();
  const cublasComputeType_t compute =
      p.dtype == DType::f32 && opts_.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  FUSEC_LT(cublasLtMatmulDescCreate(&e->desc, compute, CUDA_R_32F), what);
  // C^T (N x M) = B^T (N x K) * A^T (K x M): cuBLASLt's A is our B, its B our A.
  const cublasOperation_t opA = p.b.colMajor ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opB = p.a.colMajor ? CUBLAS_OP_T : CUBLAS_OP_N;
  FUSEC_LT(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof opA), what);
  FUSEC_LT(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof opB), what);
  const cudaDataType_t dt = dataType(p.dtype);
  // Stored (column-major) extents: op N stores rows x cols of the operand as given.
  auto layout = [&](cublasLtMatrixLayout_t& l, uint64_t rows, uint64_t cols, int64_t ld, int64_t stride) {
    FUSEC_LT(cublasLtMatrixLayoutCreate(&l, dt, rows, cols, ld), what);
    if (p.batch == 1) return;
    const int32_t count = int32_t(p.batch);
    FUSEC_LT(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count), what);
    FUSEC_LT(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
             what);
  };
  if (p.b.colMajor)
    layout(e->a, uint64_t(p.K), uint64_t(p.N), p.b.ld, p.b.batchStride);
  else
    layout(e->a, uint64_t(p.N), uint64_t(p.K), p.b.ld, p.b.batchStride);
  if (p.a.colMajor)
    layout(e->b, uint64_t(p.M), uint64_t(p.K), p.a.ld, p.a.batchStride);
  else
    layout(e->b, uint64_t(p.K), uint64_t(p.M), p.a.ld, p.a.batchStride);
  layout(e->c, uint64_t(p.N), uint64_t(p.M), p.c.ld, p.c.batchStride);

  cublasLtMatmulPreference_t pref = nullptr;
  FUSEC_LT(cublasLtMatmulPreferenceCreate(&pref), what);
  const uint64_t ws = opts_.workspaceBytes;
  const uint32_t al[3] = {uint32_t(alignB), uint32_t(alignA), uint32_t(alignC)};  // swapped, as above
  cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[2], sizeof al[2]);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulAlgoGetHeuristic(handle_, e->desc, e->a, e->b, e->c, e->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  FUSEC_LT(s, what);
  if (found == 0) throw Error("cuBLASLt has no algorithm for " + what);
  e->algo = result.algo;
  return *cache_.emplace(key, std::move(e)).first->second;
}

void CublasLtGemm::run(const GemmPlan& p, const void* a, const void* b, void* c, cudaStream_t stream,
                       const std::string& what) {
  Entry& e = entryFor(p, alignmentOf(a, p, 0, p.a.batchStride), alignmentOf(b, p, 1, p.b.batchStride),
                      alignmentOf(c, p, 2, p.c.batchStride), what);
  const int64_t eb = dtypeBytes(p.dtype);
  for (const auto& l : p.launches) {
    const char* pa = static_cast<const char*>(a) + l[0] * eb;
    const char* pb = static_cast<const char*>(b) + l[1] * eb;
    char* pc = static_cast<char*>(c) + l[2] * eb;
    FUSEC_LT(cublasLtMatmul(handle_, e.desc, &p.alpha, pb, e.a, pa, e.b, &p.beta, pc, e.c, pc, e.c, &e.algo,
                            workspace_.data(), workspace_.bytes(), stream),
             what);
  }
}

}  // namespace fusec::rt
