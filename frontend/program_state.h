// The values of the params that the program passes add beyond the model's weights, found by
// their roles (ir/roles.h): AdamW's moments (exp_avg, exp_avg_sq) start at zero, and each
// cached weight copy (bf16_copy, from cache-weight-casts) starts as bf16 of its `of` weight;
// the step's in-place updates carry both on. Shared by the CPU interpreter (`fusec run
// --device cpu`) and the GPU runtime, so both start a program from the same state.
#pragma once
#include "ir/graph.h"
#include "ir/host_tensor.h"

namespace fusec {

// Adds to `env` a value for every param of `g` it lacks. Throws Error("internal: …") for a
// weight missing from `env`, or a cached copy of a weight missing from it.
void bindProgramState(const Graph& g, Bindings& env);

}  // namespace fusec
