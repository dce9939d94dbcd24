// The two ceilings a benchmark row is judged against, measured in the same run as the rows
// (clocks, power limits and MIG slices differ between machines and days): the dense GEMM
// rate (cuBLASLt through runtime/cublaslt_gemm.h, the same library and settings the compiled
// programs use) and the device copy bandwidth.
#pragma once
#include <cstddef>

namespace fusec::bench {

struct Ceilings {
  double bf16Tflops = 0;  // bf16 inputs/outputs, f32 accumulation
  double f32Tflops = 0;   // strict f32 (no TF32), as the fp32 rows run
  double copyGBps = 0;    // device-to-device cudaMemcpyAsync, read + write bytes per second
  double tflops(bool bf16) const { return bf16 ? bf16Tflops : f32Tflops; }
};

// Square GEMMs of side `n` (default 8192: large enough for the peak, 384 MiB in bf16 and
// 768 MiB in f32) and a copy of `copyBytes`, each the median of `iters` timed calls after
// `warmup`. Throws Error("out of GPU memory: ...") when the buffers do not fit.
Ceilings measureCeilings(int warmup = 3, int iters = 10, long n = 8192, size_t copyBytes = size_t(1) << 30);

}  // namespace fusec::bench
