// Roofline accounting of one launch (a top-level kernel or matmul of a planned graph): the
// bytes it must move through device memory and the FLOPs it must do, from the IR alone. Every
// operand is read once and every result written once (a kernel that re-reads its row from
// memory, or an uncoalesced access, moves more than this: the gap between this floor and the
// measured time is what `fusec profile` shows as the % of the copy ceiling).
//   kernel: the distinct operands (each whole: kernel operands are dense values, a small
//           broadcast operand counts its own elements, not the broadcast's) + the results;
//   GEMM:   A and B (the views the plan reads) + C, and C again when the plan accumulates
//           (beta != 0); FLOPs 2*M*N*K per matrix.
#pragma once
#include <cstdint>

#include "ir/graph.h"

namespace fusec::bench {

struct LaunchTraffic {
  int64_t bytesRead = 0, bytesWritten = 0;
  int64_t flops = 0;          // GEMMs only: the tensor-core work (kernels: 0)
  DType gemmDtype = DType::f32;  // GEMMs: the operands' dtype, which picks the GEMM ceiling
  int64_t bytes() const { return bytesRead + bytesWritten; }
};

// Throws Error for an op that is not a launch.
LaunchTraffic launchTraffic(const Op& launch);

// The floor of a launch or group in milliseconds: the larger of bytes over the copy
// bandwidth and FLOPs over the GEMM rate (either ceiling 0: that term is left out).
double floorMs(int64_t bytes, int64_t flops, double copyGBps, double gemmTflops);

}  // namespace fusec::bench
