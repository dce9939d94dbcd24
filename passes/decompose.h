// Decompose as a function on one graph, for program builders that must run it between
// tracing and autodiff (the pipeline's order: decompose, autocast, autodiff, adamw).
#pragma once
#include "ir/graph.h"

namespace fusec {

// Replaces every Composite op of `g` (and of its kernel bodies) by primitives; returns
// whether anything changed. Throws Error for a composite without a decomposition.
bool decomposeGraph(Graph& g);

// Replaces only `attention` ops, by matmuls, the scale and mask, and a `softmax` op: the
// program's first pass, so that autocast sees attention's GEMMs while autodiff still uses
// the hand-written VJPs of the other composites (softmax's backward reads only its output;
// rmsnorm's recomputes its row statistics), which keep the saved activations lean.
// attention_backward (autodiff's VJP of attention) likewise, by its formula in ops.def.
bool decomposeAttention(Graph& g);

// Every composite except attention and attention_backward (the fused lowering: fuse makes
// each of them one kernel of the `attention` family).
bool decomposeKeepingAttention(Graph& g);

}  // namespace fusec
