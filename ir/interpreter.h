// CPU reference interpreter for every op, fused kernel bodies included. It is the oracle
// for passes and for generated kernels: f32 arithmetic in float with double
// accumulators for reductions and matmul; bf16/f16 emulated by rounding every result to
// nearest-even; integer and bool values held as int64.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/host_tensor.h"  // HostTensor, Bindings, rounding

namespace fusec {

// Evaluates `g`; returns one tensor per graph output. Throws Error on a missing or
// mistyped binding or an out-of-range index.
std::vector<HostTensor> interpret(const Graph& g, const Bindings& env);

}  // namespace fusec
