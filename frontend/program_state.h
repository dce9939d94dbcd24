// The values of the params that the program passes add beyond the model's weights, found by
// their roles (ir/roles.h): AdamW's moments (exp_avg, exp_avg_sq) start at zero, and each
// cached weight copy (bf16_copy, from cache-weight-casts) starts as bf16 of its `of` weight;
// the step's in-place updates carry both on. Shared by the CPU interpreter (`fusec run
// --device cpu`) and the GPU runtime, so both start a program from the same state.
#pragma once
#include <optional>

#include "ir/graph.h"
#include "ir/host_tensor.h"

namespace fusec {

// Adds to `env` a value for every param of `g` it lacks. A param that holds one rank's block
// of rows (attribute ranks, passes/shard_master_weights.cpp) is bound as `rank`'s rows of the
// whole weight in `env` (its bf16 copy made from the whole weight first). Throws
// Error("internal: …") for a weight missing from `env`, a cached copy of a weight missing from
// it, or a rank's rows to bind without `rank`.
void bindProgramState(const Graph& g, Bindings& env, std::optional<int64_t> rank = std::nullopt);

}  // namespace fusec
