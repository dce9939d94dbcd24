// Rewrites a graph as a plan says: each planned kernel becomes a `kernel` op whose isolated
// body holds its members plus clones of the inlined ops they read; the top level keeps only
// sources, GEMMs, kernels, kept views/constants and resident concats.
#pragma once
#include "ir/graph.h"
#include "passes/fusion/plan.h"

namespace fusec::fusion {

void outline(Graph& g, const Plan& plan);

}  // namespace fusec::fusion
