// The `step-invariant` pass: records on each top-level kernel whether it computes the same
// values in every call (ir/step_invariant.h), in graph order, so a kernel reading another
// recorded one is recorded too. Runs after fuse and before schedule and memory-plan, whose
// liveness reads the record (the record follows the operands, not the order); on a graph already planned it changes nothing or refuses.
#pragma once

#include "ir/graph.h"

namespace fusec {

// Sets or clears `step_invariant` on every top-level kernel of g; true when a record changed.
bool markStepInvariant(Graph& g);

}  // namespace fusec
