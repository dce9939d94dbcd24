// Kernels off the step's critical path: nothing later in the function reads any of their
// results (AdamW's updates, whose results are only the function's outputs). The `schedule`
// pass records them (`kernel ... {side_stream = true}`), and the runtime launches them on a
// second, lower-priority stream beside the compute, each after the work scheduled before it;
// a later launch waits for one only where it writes memory that kernel reads or writes, or
// reads memory it writes (runtime/executable.cpp). So a layer's AdamW, bound by memory
// bandwidth, runs beside the next layers' backward GEMMs instead of between them. The
// verifier checks each record with the same rule.
#pragma once
#include "ir/graph.h"
#include "support/ptr_hash.h"

namespace fusec {

// The values top-level ops of `g` read, each view seen through to the value it views.
PtrSet<const Value*> valuesRead(const Graph& g);

// Whether `op` is a kernel whose results no top-level op reads (`read`: valuesRead), that is
// not step-invariant (those run once, before everything), and that makes at least one value.
bool offCriticalPath(const Op& op, const PtrSet<const Value*>& read);

}  // namespace fusec
