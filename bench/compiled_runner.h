// The compiled side of a benchmark row: the pass's program (bench/program.h) loaded as a
// runtime Executable and timed with CUDA events on its stream. No LibTorch here.
#pragma once
#include "bench/bench_case.h"
#include "codegen/cubin_cache.h"

namespace fusec::bench {

// `env` holds the weights, ids and targets (benchInputs); the program's initial state
// (moments, bf16 copies) is added to it. The step program binds its 1-based `step` input
// before every call, as a training loop does, and that upload is timed with the step.
// Throws Error("out of GPU memory: ...") when the plan does not fit (the row becomes OOM).
TimedRun runCompiled(const BenchCase& c, Bindings& env, const codegen::CubinCache* cache);

}  // namespace fusec::bench
