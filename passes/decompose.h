// Decompose as a function on one graph, for program builders that must run it between
// tracing and autodiff (the pipeline's order: decompose, autocast, autodiff, adamw).
#pragma once
#include "ir/graph.h"

namespace fusec {

// Replaces every Composite op of `g` (and of its kernel bodies) by primitives; returns
// whether anything changed. Throws Error for a composite without a decomposition.
bool decomposeGraph(Graph& g);

}  // namespace fusec
