// Which outputs of a graph can be written straight into a caller's buffer (the C interface's
// zero-copy outputs, api/c_api.h), decided from the graph: read by the runtime (which moves
// that storage) and by memory-plan-outputs-last (which plans it above the rest). An output is
// placed by moving the storage it is read from to the caller's address. That storage must
// hold exactly the output's bytes in the output's order (the value itself, or a value the
// output is a reshape of) and be the arena's to move: not a source, not a param's in-place
// update, not a resident concat, not a step-invariant value (computed at the first call only,
// into its own slot), and read by no earlier output (two outputs cannot both own it).
#pragma once
#include <vector>

#include "ir/graph.h"
#include "passes/liveness.h"

namespace fusec {

// One entry per output of `g`: the value whose storage moves to place it, or nullptr where
// the output is copied out after each call.
std::vector<const Value*> outputPlacements(const Graph& g);
std::vector<const Value*> outputPlacements(const Graph& g, const StorageMap& storage);  // storage: g's

}  // namespace fusec
