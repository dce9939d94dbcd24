// cuBLASLt's entry points that fusec calls, each forwarding to the real function of
// libcublasLt, opened at the first call (codegen/lazy_library.h says why). The signatures are
// cublasLt.h's; a function fusec starts calling needs its line here, or the link fails.
#include <cublasLt.h>

#include "codegen/lazy_library.h"

namespace {
fusec::LazyLibrary& library() {
  static fusec::LazyLibrary lib(FUSEC_CUBLASLT_SONAME, FUSEC_CUBLASLT_PATH);
  return lib;
}
using fusec::lazyFunction;
}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  static const auto f = lazyFunction<decltype(&cublasLtCreate)>(library(), "cublasLtCreate");
  return f(lightHandle);
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  static const auto f = lazyFunction<decltype(&cublasLtDestroy)>(library(), "cublasLtDestroy");
  return f(lightHandle);
}
const char* cublasLtGetStatusString(cublasStatus_t status) {
  static const auto f = lazyFunction<decltype(&cublasLtGetStatusString)>(library(), "cublasLtGetStatusString");
  return f(status);
}
size_t cublasLtGetVersion() {
  static const auto f = lazyFunction<decltype(&cublasLtGetVersion)>(library(), "cublasLtGetVersion");
  return f();
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
  static const auto f = lazyFunction<decltype(&cublasLtMatmul)>(library(), "cublasLtMatmul");
  return f(lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
           workspaceSizeInBytes, stream);
}
cublasStatus_t cublasLtMatmulAlgoCapGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                 cublasLtMatmulAlgoCapAttributes_t attr, void* buf, size_t sizeInBytes,
                                                 size_t* sizeWritten) {
  static const auto f =
      lazyFunction<decltype(&cublasLtMatmulAlgoCapGetAttribute)>(library(), "cublasLtMatmulAlgoCapGetAttribute");
  return f(algo, attr, buf, sizeInBytes, sizeWritten);
}
cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                       cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                       cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                       const cublasLtMatmulAlgo_t* algo, cublasLtMatmulHeuristicResult_t* result) {
  static const auto f = lazyFunction<decltype(&cublasLtMatmulAlgoCheck)>(library(), "cublasLtMatmulAlgoCheck");
  return f(lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, algo, result);
}
cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr, void* buf,
                                                    size_t sizeInBytes, size_t* sizeWritten) {
  static const auto f =
      lazyFunction<decltype(&cublasLtMatmulAlgoConfigGetAttribute)>(library(), "cublasLtMatmulAlgoConfigGetAttribute");
  return f(algo, attr, buf, sizeInBytes, sizeWritten);
}
cublasStatus_t cublasLtMatmulAlgoConfigSetAttribute(cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes) {
  static const auto f =
      lazyFunction<decltype(&cublasLtMatmulAlgoConfigSetAttribute)>(library(), "cublasLtMatmulAlgoConfigSetAttribute");
  return f(algo, attr, buf, sizeInBytes);
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
  static const auto f =
      lazyFunction<decltype(&cublasLtMatmulAlgoGetHeuristic)>(library(), "cublasLtMatmulAlgoGetHeuristic");
  return f(lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference, requestedAlgoCount,
           heuristicResultsArray, returnAlgoCount);
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  static const auto f = lazyFunction<decltype(&cublasLtMatmulDescCreate)>(library(), "cublasLtMatmulDescCreate");
  return f(matmulDesc, computeType, scaleType);
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  static const auto f = lazyFunction<decltype(&cublasLtMatmulDescDestroy)>(library(), "cublasLtMatmulDescDestroy");
  return f(matmulDesc);
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes) {
  static const auto f =
      lazyFunction<decltype(&cublasLtMatmulDescSetAttribute)>(library(), "cublasLtMatmulDescSetAttribute");
  return f(matmulDesc, attr, buf, sizeInBytes);
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  static const auto f =
      lazyFunction<decltype(&cublasLtMatmulPreferenceCreate)>(library(), "cublasLtMatmulPreferenceCreate");
  return f(pref);
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  static const auto f =
      lazyFunction<decltype(&cublasLtMatmulPreferenceDestroy)>(library(), "cublasLtMatmulPreferenceDestroy");
  return f(pref);
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes) {
  static const auto f =
      lazyFunction<decltype(&cublasLtMatmulPreferenceSetAttribute)>(library(), "cublasLtMatmulPreferenceSetAttribute");
  return f(pref, attr, buf, sizeInBytes);
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  static const auto f = lazyFunction<decltype(&cublasLtMatrixLayoutCreate)>(library(), "cublasLtMatrixLayoutCreate");
  return f(matLayout, type, rows, cols, ld);
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  static const auto f = lazyFunction<decltype(&cublasLtMatrixLayoutDestroy)>(library(), "cublasLtMatrixLayoutDestroy");
  return f(matLayout);
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes) {
  static const auto f =
      lazyFunction<decltype(&cublasLtMatrixLayoutSetAttribute)>(library(), "cublasLtMatrixLayoutSetAttribute");
  return f(matLayout, attr, buf, sizeInBytes);
}

}  // extern "C"
