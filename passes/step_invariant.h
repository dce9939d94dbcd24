// Values a program computes alike in every call: those made from constants and iotas alone,
// through views and compute ops (RoPE's frequency and angle tables, 3 launches of every
// training step). They need computing once. Liveness keeps their buffers for the whole program
// (passes/liveness.h), so nothing else ever writes there, and the runtime runs their launches
// at the first call only (runtime/executable.h).
#pragma once
#include <unordered_set>

#include "ir/graph.h"
#include "support/ptr_hash.h"

namespace fusec {

// The top-level ops of `g` whose results are step-invariant: every op other than `input` and
// `param` whose operands are all results of such ops (constants and iotas, which have none,
// included). In graph order's closure, so a view of an invariant value is invariant too.
PtrSet<const Op*> stepInvariantOps(const Graph& g);

}  // namespace fusec
