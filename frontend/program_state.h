// The values of the params that the program passes add beyond the model's weights: AdamW's
// moments (`W.exp_avg`, `W.exp_avg_sq`) start at zero, and each cached weight copy `W.bf16`
// (cache-weight-casts) starts as bf16(W); the step's in-place updates carry both on. Shared
// by the CPU interpreter (`fusec run --device cpu`) and the GPU runtime, so both start a
// program from the same state.
#pragma once
#include "ir/graph.h"
#include "ir/host_tensor.h"

namespace fusec {

// Adds to `env` a value for every param of `g` it lacks. Throws Error("internal: …") for a
// param that is neither a weight in `env`, a moment nor a cached copy of a weight in `env`.
void bindProgramState(const Graph& g, Bindings& env);

}  // namespace fusec
