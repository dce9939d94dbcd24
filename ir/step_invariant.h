// Values a program computes alike in every call: those made from constants and iotas alone,
// through views and kernels (RoPE's frequency table and the cos and sin tables made from it:
// 5 launches of small's training step). They need computing once. The `step-invariant` pass (passes/step_invariant.cpp)
// decides which kernels compute such values, after fusion and before the memory plan, and
// records it on them (`kernel ... {step_invariant = true}`); liveness keeps their buffers for
// the whole program (passes/liveness.h), so nothing else ever writes there, the runtime runs
// their launches at the first call only (runtime/executable.h), and the profile counts them
// as no time a step. All of them read the record through isStepInvariant.
#pragma once

#include "ir/graph.h"

namespace fusec {

// A kernel recorded step-invariant, or an op that reads nothing and makes values (a constant,
// an iota: invariant by its kind; never an input or a param).
bool isStepInvariant(const Op& op);

// Whether v, looking through views, is made by a step-invariant op: what a kernel recorded
// step-invariant may read (the verifier checks each record against it, so a record read from
// text cannot make the runtime skip a kernel whose inputs change between steps).
bool isStepInvariantValue(const Value* v);

}  // namespace fusec
