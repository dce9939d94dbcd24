// A bf16 GEMM whose result is only widened to f32 writes f32 itself (matmul's out_dtype:
// cuBLASLt accumulates in f32 either way, and writes bf16 x bf16 -> f32). The cast was a kernel
// of its own wherever nothing fused it into a reader: a function output (the torch.compile
// backend's weight gradients, autocast's bf16 GEMM cast back to the f32 parameter's dtype) and
// a gradient before a collective (data-parallel). It read the bf16 result back and wrote f32;
// now the GEMM writes the f32 directly, and the value is the accumulator's, not rounded to bf16
// first (nearer the f32 product than the cast's).
#pragma once
#include <functional>

#include "ir/graph.h"

namespace fusec {

// If `cast` is cast(bf16 -> f32) of a matmul result that nothing else reads (`uses`: a value's
// readers, outputs counted), without an out_dtype yet: the matmul now writes f32
// (out_dtype), and its result is returned; the cast is left for the caller to drop. Else null.
Value* widenGemmCast(Value* cast, const std::function<int(const Value*)>& uses);

}  // namespace fusec
