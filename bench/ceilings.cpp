#include "bench/ceilings.h"

#include <cuda_runtime_api.h>

#include "bench/stats.h"
#include "bench/timer.h"
#include "runtime/cublaslt_gemm.h"
#include "runtime/device.h"

namespace fusec::bench {

namespace {

// C = A B, all n x n row-major, one launch: the plan a planned matmul of that shape gets.
rt::GemmPlan squarePlan(int64_t n, DType dt) {
  rt::GemmPlan p;
  p.M = p.N = p.K = n;
  p.dtype = dt;
  p.a.ld = p.b.ld = p.c.ld = n;
  p.launches = {{0, 0, 0}};
  return p;
}

// Operands are filled with a non-zero byte pattern (0x3c3c...: 0.0115 in f32, 0.0115 in
// bf16): tensor cores draw less power on zeros, which would overstate the rate.
double gemmTflops(int64_t n, DType dt, int warmup, int iters, cudaStream_t stream) {
  const size_t bytes = size_t(n * n) * size_t(dtypeBytes(dt));
  rt::DeviceBuffer a(bytes, "GEMM ceiling"), b(bytes, "GEMM ceiling"), c(bytes, "GEMM ceiling");
  FUSEC_CUDA(cudaMemset(a.data(), 0x3c, bytes), "GEMM ceiling");
  FUSEC_CUDA(cudaMemset(b.data(), 0x3c, bytes), "GEMM ceiling");
  rt::CublasLtGemm gemm;
  const rt::GemmPlan p = squarePlan(n, dt);
  auto ms = timeOnStream([&] { gemm.run(p, a.data(), b.data(), c.data(), stream, "GEMM ceiling"); }, stream, warmup, iters);
  return double(p.flops()) / (summarize(ms).median * 1e-3) / 1e12;
}

double copyGBps(size_t bytes, int warmup, int iters, cudaStream_t stream) {
  rt::DeviceBuffer src(bytes, "copy ceiling"), dst(bytes, "copy ceiling");
  FUSEC_CUDA(cudaMemset(src.data(), 0x3c, bytes), "copy ceiling");
  auto ms = timeOnStream(
      [&] { FUSEC_CUDA(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream), "copy ceiling"); },
      stream, warmup, iters);
  return 2.0 * double(bytes) / (summarize(ms).median * 1e-3) / 1e9;
}

}  // namespace

Ceilings measureCeilings(int warmup, int iters, long n, size_t copyBytes) {
  rt::openDevice();
  cudaStream_t stream = nullptr;
  FUSEC_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "ceilings");
  struct Destroy {
    cudaStream_t s;
    ~Destroy() { cudaStreamDestroy(s); }
  } destroy{stream};
  Ceilings c;
  c.bf16Tflops = gemmTflops(n, DType::bf16, warmup, iters, stream);
  c.f32Tflops = gemmTflops(n, DType::f32, warmup, iters, stream);
  c.copyGBps = copyGBps(copyBytes, warmup, iters, stream);
  return c;
}

}  // namespace fusec::bench
