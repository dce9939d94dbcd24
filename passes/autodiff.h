// Reverse-mode automatic differentiation over the fusec IR.
#pragma once
#include <vector>

#include "ir/graph.h"

namespace fusec {

// Appends to `g` the reverse-mode gradient of the scalar `loss` (rank 0, float) with respect to
// each value in `wrt`, seeding d(loss) = 1. Returns one gradient per entry of `wrt`, with the same
// type; a value `loss` does not depend on gets a zero constant. Throws Error naming the op if
// some op on the path has no derivative (e.g. a kernel op, or an integer-valued path).
std::vector<Value*> appendGradients(Graph& g, Value* loss, const std::vector<Value*>& wrt);

// The same for a vector-Jacobian product: the gradient of sum(out * cotangent) with respect to
// each value in `wrt`, seeding d(out) = cotangent (a float value of out's shape, cast to out's
// dtype where they differ).
std::vector<Value*> appendVjp(Graph& g, Value* out, Value* cotangent, const std::vector<Value*>& wrt);

}  // namespace fusec
