// The GPU runtime (runtime/executable.h) as a ProgramRunner backend of the eager comparisons.
#pragma once
#include <memory>

#include "planned_program.h"

namespace fusec::test {

// An Executable of `g` (which must outlive it), kernels through the default cubin cache, f32
// GEMMs strict (no TF32), replayed as a CUDA graph from its second run on. gemmAutotune false
// takes cuBLASLt's heuristic's first algorithm for every GEMM instead of the fastest timed one:
// the same program with other f32 summation orders.
std::unique_ptr<ProgramRunner> executableRunner(const Graph& g, bool gemmAutotune = true);

}  // namespace fusec::test
