// cuBLASLt's entry points that fusec calls, each forwarding to the real function of
// libcublasLt, opened at the first call (codegen/lazy_library.h says why). The signatures are
// cublasLt.h's; a function fusec starts calling needs its line here, or the link fails.
#include <cublasLt.h>

#include "codegen/lazy_library.h"

namespace {
FUSEC_LAZY_LIBRARY(FUSEC_CUBLASLT_SONAME, FUSEC_CUBLASLT_PATH)
}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  return lazyCall<&cublasLtCreate>(library(), "cublasLtCreate", lightHandle);
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  return lazyCall<&cublasLtDestroy>(library(), "cublasLtDestroy", lightHandle);
}
const char* cublasLtGetStatusString(cublasStatus_t status) {
  return lazyCall<&cublasLtGetStatusString>(library(), "cublasLtGetStatusString", status);
}
size_t cublasLtGetVersion() {
  return lazyCall<&cublasLtGetVersion>(library(), "cublasLtGetVersion");
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
  return lazyCall<&cublasLtMatmul>(library(), "cublasLtMatmul", lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc,
                                   beta, C, Cdesc, D, Ddesc, algo, workspace, workspaceSizeInBytes, stream);
}
cublasStatus_t cublasLtMatmulAlgoCapGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                 cublasLtMatmulAlgoCapAttributes_t attr, void* buf, size_t sizeInBytes,
                                                 size_t* sizeWritten) {
  return lazyCall<&cublasLtMatmulAlgoCapGetAttribute>(library(), "cublasLtMatmulAlgoCapGetAttribute",
                                                      algo, attr, buf, sizeInBytes, sizeWritten);
}
cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                       cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                       cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                       const cublasLtMatmulAlgo_t* algo, cublasLtMatmulHeuristicResult_t* result) {
  return lazyCall<&cublasLtMatmulAlgoCheck>(library(), "cublasLtMatmulAlgoCheck",
                                            lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, algo, result);
}
cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr, void* buf,
                                                    size_t sizeInBytes, size_t* sizeWritten) {
  return lazyCall<&cublasLtMatmulAlgoConfigGetAttribute>(library(), "cublasLtMatmulAlgoConfigGetAttribute",
                                                         algo, attr, buf, sizeInBytes, sizeWritten);
}
cublasStatus_t cublasLtMatmulAlgoConfigSetAttribute(cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes) {
  return lazyCall<&cublasLtMatmulAlgoConfigSetAttribute>(library(), "cublasLtMatmulAlgoConfigSetAttribute",
                                                         algo, attr, buf, sizeInBytes);
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
  return lazyCall<&cublasLtMatmulAlgoGetHeuristic>(library(), "cublasLtMatmulAlgoGetHeuristic",
                                                   lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference,
                                                   requestedAlgoCount, heuristicResultsArray, returnAlgoCount);
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  return lazyCall<&cublasLtMatmulDescCreate>(library(), "cublasLtMatmulDescCreate", matmulDesc, computeType, scaleType);
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  return lazyCall<&cublasLtMatmulDescDestroy>(library(), "cublasLtMatmulDescDestroy", matmulDesc);
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes) {
  return lazyCall<&cublasLtMatmulDescSetAttribute>(library(), "cublasLtMatmulDescSetAttribute",
                                                   matmulDesc, attr, buf, sizeInBytes);
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return lazyCall<&cublasLtMatmulPreferenceCreate>(library(), "cublasLtMatmulPreferenceCreate", pref);
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return lazyCall<&cublasLtMatmulPreferenceDestroy>(library(), "cublasLtMatmulPreferenceDestroy", pref);
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes) {
  return lazyCall<&cublasLtMatmulPreferenceSetAttribute>(library(), "cublasLtMatmulPreferenceSetAttribute",
                                                         pref, attr, buf, sizeInBytes);
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  return lazyCall<&cublasLtMatrixLayoutCreate>(library(), "cublasLtMatrixLayoutCreate",
                                               matLayout, type, rows, cols, ld);
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  return lazyCall<&cublasLtMatrixLayoutDestroy>(library(), "cublasLtMatrixLayoutDestroy", matLayout);
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes) {
  return lazyCall<&cublasLtMatrixLayoutSetAttribute>(library(), "cublasLtMatrixLayoutSetAttribute",
                                                     matLayout, attr, buf, sizeInBytes);
}

}  // extern "C"
