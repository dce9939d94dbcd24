// The eager side of a benchmark row: bench/eager_model on device "cuda", timed with CUDA events
// on torch's stream, with the caching allocator's peak allocated and reserved bytes. The
// header has no torch types; LibTorch stays in eager_runner.cpp and eager_model.cpp.
#pragma once
#include "bench/bench_case.h"

namespace fusec::bench {

// `env` holds the weights, ids and targets (benchInputs). Throws Error (LibTorch's own
// "CUDA out of memory" among them: the row becomes OOM). The model and its cached blocks are
// released before returning, so the next row starts from an empty allocator.
TimedRun runEager(const BenchCase& c, const Bindings& env);

}  // namespace fusec::bench
