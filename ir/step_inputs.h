// The inputs a program takes afresh at every step, as functions of the step's 1-based index:
// AdamW's step counter (f32: its bias correction reads it) and the dropout ops' key (i64: the
// Philox key of the step's masks, ir/philox.h). Every caller that steps a program (the API's
// CompiledProgram, the bench, the profile) binds them from here, so they agree, and a run
// resumed at step k draws the masks the uninterrupted run drew at k.
#pragma once
#include <cstdint>

#include "ir/graph.h"
#include "ir/host_tensor.h"

namespace fusec {

// The key of step `step` of a run seeded `seed`: a 64-bit mix (SplitMix64's finaliser) of the
// two, so nearby seeds and steps give unrelated keys.
int64_t dropoutKey(uint64_t seed, int64_t step);

// The per-step inputs `g` has (by role), bound for step `step`: none for a program without them.
Bindings stepInputs(const Graph& g, int64_t step, uint64_t dropoutSeed);

}  // namespace fusec
