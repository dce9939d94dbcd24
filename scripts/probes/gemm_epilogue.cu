// Issue 41 item 3: do cuBLASLt's GELU epilogues cost the GEMM anything? GPT-2's MLP, as fusec
// runs it today, is a plain GEMM and then a generated kernel: forward h = x W1 (the GEMM), then
// gelu(h + b1) (reads h, writes the activation); backward da = dY W2^T (the GEMM), then
// dh = da gelu'(h + b1) with the bias gradient (reads da and h, writes dh). With
// CUBLASLT_EPILOGUE_GELU_AUX_BIAS the forward GEMM writes gelu(h + b1) and keeps h + b1 as its
// aux output; with CUBLASLT_EPILOGUE_DGELU_BGRAD the backward GEMM reads that aux and writes dh
// and the bias gradient itself. The bytes saved (bench/RESULTS.md, thirty-second session) pay
// only if the epilogue GEMMs run about as fast as the plain ones: this times both, bf16 with
// f32 accumulation, at GPT-2 small's shapes (T tokens x 768 -> 3072 and back), each the best
// of cuBLASLt's heuristic's first 8 algorithms (median of 20 after 5 warm-ups, CUDA events),
// and checks the epilogue against the plain GEMM plus a host-side GELU on a few elements.
// Run on a GPU machine:
//   nvcc -O2 -arch=sm_90 -o gemm_epilogue scripts/probes/gemm_epilogue.cu -lcublasLt && ./gemm_epilogue [T]
// (A probe, linked to cuBLASLt directly; fusec itself opens it at first use.)
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

// One line and exit 1 on a failed CUDA or cuBLASLt call.
void fail(const char* call, const char* why) {
  std::fprintf(stderr, "error: %s: %s\n", call, why);
  std::exit(1);
}
#define CHECK_CUDA(x) \
  if (cudaError_t e = (x); e != cudaSuccess) fail(#x, cudaGetErrorString(e))
#define CHECK_LT(x) \
  if (cublasStatus_t s = (x); s != CUBLAS_STATUS_SUCCESS) fail(#x, ("cublas status " + std::to_string(int(s))).c_str())

namespace {

// Column-major throughout: D (m x n) = op(A) (m x k) B (k x n). With m the output features and
// n the tokens, D is the row-major [tokens, features] activation fusec stores; A is the weight
// (stored k x m, transposed by the op), B the row-major [tokens, k] input.
struct Gemm {
  int m, n, k;
  cublasLtEpilogue_t epilogue;
  const char* what;
};

void* deviceRandom(size_t count, std::mt19937& rng, float scale) {
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<__nv_bfloat16> h(count);
  for (auto& x : h) x = __float2bfloat16(nd(rng));
  void* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, count * sizeof(__nv_bfloat16)));
  CHECK_CUDA(cudaMemcpy(d, h.data(), count * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
  return d;
}

float toFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
float geluTanh(float x) { return 0.5f * x * (1.f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x))); }

struct Operands {
  void *a, *b, *d, *bias, *aux;
};

// Median ms of the best of the heuristic's first algorithms, and that algorithm's index.
double timeGemm(cublasLtHandle_t lt, const Gemm& g, const Operands& o, void* ws, size_t wsBytes, cudaStream_t st,
                bool withEpilogue, int* chosen) {
  cublasLtMatmulDesc_t desc;
  CHECK_LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  if (withEpilogue) {
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &g.epilogue, sizeof g.epilogue));
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &o.bias, sizeof o.bias));
    const cudaDataType_t biasType = CUDA_R_16BF;
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &biasType, sizeof biasType));
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &o.aux, sizeof o.aux));
    const int64_t auxLd = g.m;
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &auxLd, sizeof auxLd));
    const cudaDataType_t auxType = CUDA_R_16BF;
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &auxType, sizeof auxType));
  }
  cublasLtMatrixLayout_t la, lb, ld;
  CHECK_LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, g.k, g.m, g.k));
  CHECK_LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, g.k, g.n, g.k));
  CHECK_LT(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, g.m, g.n, g.m));
  cublasLtMatmulPreference_t pref;
  CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
  CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsBytes, sizeof wsBytes));
  cublasLtMatmulHeuristicResult_t res[8];
  int found = 0;
  CHECK_LT(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 8, res, &found));
  if (found == 0) {
    std::printf("%s: no algorithm for %s\n", g.what, withEpilogue ? "the epilogue" : "the plain GEMM");
    return -1;
  }
  const float alpha = 1.f, beta = 0.f;
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  double best = 1e30;
  for (int i = 0; i < found; ++i) {
    auto run = [&] {
      return cublasLtMatmul(lt, desc, &alpha, o.a, la, o.b, lb, &beta, o.d, ld, o.d, ld, &res[i].algo, ws, wsBytes, st);
    };
    if (run() != CUBLAS_STATUS_SUCCESS) continue;
    for (int w = 0; w < 5; ++w) run();
    std::vector<float> ms;
    for (int r = 0; r < 20; ++r) {
      CHECK_CUDA(cudaEventRecord(e0, st));
      run();
      CHECK_CUDA(cudaEventRecord(e1, st));
      CHECK_CUDA(cudaEventSynchronize(e1));
      float t = 0;
      CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
    if (ms[ms.size() / 2] < best) best = ms[ms.size() / 2], *chosen = i;
  }
  // Leave D (and aux) as the chosen algorithm writes them, for the check.
  cublasLtMatmul(lt, desc, &alpha, o.a, la, o.b, lb, &beta, o.d, ld, o.d, ld, &res[*chosen].algo, ws, wsBytes, st);
  CHECK_CUDA(cudaStreamSynchronize(st));
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(desc);
  return best;
}

std::vector<__nv_bfloat16> download(const void* d, size_t count) {
  std::vector<__nv_bfloat16> h(count);
  CHECK_CUDA(cudaMemcpy(h.data(), d, count * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  const int T = argc > 1 ? std::atoi(argv[1]) : 8192;  // GPT-2 small at batch 8, context 1024
  if (T <= 0) {
    std::fprintf(stderr, "error: T must be a positive token count, not '%s'\n", argv[1]);
    return 1;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, T = %d tokens, bf16, f32 accumulation; median ms of 20, best of the heuristic's first 8\n", prop.name, T);
  cublasLtHandle_t lt;
  CHECK_LT(cublasLtCreate(&lt));
  cudaStream_t st;
  CHECK_CUDA(cudaStreamCreate(&st));
  const size_t wsBytes = size_t(32) << 20;
  void* ws;
  CHECK_CUDA(cudaMalloc(&ws, wsBytes));
  std::mt19937 rng(41);
  // Forward: [T, 768] x [768, 3072] + b1, GELU kept with its input as aux. Backward: the
  // gradient at the MLP's output [T, 768] x W2^T [768, 3072], times gelu'(aux), bias gradient.
  const Gemm gemms[] = {{3072, T, 768, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, "fc forward, GELU_AUX_BIAS"},
                        {3072, T, 768, CUBLASLT_EPILOGUE_DGELU_BGRAD, "proj dgrad, DGELU_BGRAD"}};
  std::printf("%-28s %10s %10s %8s %s\n", "GEMM (m x n x k)", "plain ms", "epilogue", "ratio", "check");
  for (const Gemm& g : gemms) {
    Operands o;
    o.a = deviceRandom(size_t(g.k) * g.m, rng, 0.05f);
    o.b = deviceRandom(size_t(g.k) * g.n, rng, 1.f);
    o.bias = deviceRandom(size_t(g.m), rng, 0.1f);
    o.aux = deviceRandom(size_t(g.m) * g.n, rng, 1.f);  // the backward reads it: h + b1
    CHECK_CUDA(cudaMalloc(&o.d, size_t(g.m) * g.n * sizeof(__nv_bfloat16)));
    const std::vector<__nv_bfloat16> auxIn = download(o.aux, size_t(g.m) * g.n);
    int plainAlgo = 0, epiAlgo = 0;
    const double plain = timeGemm(lt, g, o, ws, wsBytes, st, false, &plainAlgo);
    const std::vector<__nv_bfloat16> d0 = download(o.d, size_t(g.m) * g.n);
    const double epi = timeGemm(lt, g, o, ws, wsBytes, st, true, &epiAlgo);
    const std::vector<__nv_bfloat16> d1 = download(o.d, size_t(g.m) * g.n), aux = download(o.aux, size_t(g.m) * g.n),
                                      bias = download(o.bias, size_t(g.m));
    // The epilogue against the plain product and a host GELU (tanh form), on a sample of
    // elements: relative to the output's scale, bf16 rounding of h in between allowed for.
    double worst = 0, scale = 1e-30;
    std::mt19937 pick(7);
    for (int s = 0; s < 4096; ++s) {
      const size_t i = pick() % (size_t(g.m) * g.n), row = i % size_t(g.m);
      const float h = toFloat(d0[i]);
      float want;
      if (g.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
        const float hb = h + toFloat(bias[row]);
        want = geluTanh(hb);
        worst = std::max(worst, double(std::fabs(toFloat(aux[i]) - hb)));  // aux = h + b1
      } else {
        const float x = toFloat(auxIn[i]), eps = 1e-2f;  // gelu'(x), numerically from the tanh form
        want = h * (geluTanh(x + eps) - geluTanh(x - eps)) / (2 * eps);
      }
      worst = std::max(worst, double(std::fabs(toFloat(d1[i]) - want)));
      scale = std::max(scale, double(std::fabs(want)));
    }
    std::printf("%-28s %10.4f %10.4f %7.3fx rel err %.2e (algos %d, %d)  %s\n",
                (std::to_string(g.m) + " x " + std::to_string(g.n) + " x " + std::to_string(g.k)).c_str(), plain, epi,
                epi / plain, worst / scale, plainAlgo, epiAlgo, g.what);
    for (void* p : {o.a, o.b, o.bias, o.aux, o.d}) cudaFree(p);
  }
  return 0;
}
