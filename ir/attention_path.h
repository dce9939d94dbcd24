// Whether an attention op can run on the tensor-core templates (codegen/attention_mma.cuh and
// attention_wgmma.cuh) or needs the SIMT one (attention_simt.cuh), as far as its types, its
// scale and its operands' layouts decide it. Codegen chooses the template by this; the fusion
// planner asks it before giving an attention kernel work only the tensor-core templates do
// (passes/fusion/plan.cpp absorbBackwardAssembly), so the two never disagree.
#pragma once
#include <string>

#include "ir/graph.h"
#include "ir/strided_view.h"

namespace fusec {

// Why `att` (attention or attention_backward) needs the SIMT template by its types and scale;
// "" when tensor cores take it (bf16 or f32, d = dv a multiple of 16 up to 128, a positive
// scale, at most 65535 row tiles of 64).
std::string attentionSimtReason(const Op& att);

// Whether an operand read as `view` (shape `s`, elements of `bytes` bytes) starts every row at
// a multiple of 16 bytes from its base, as cp.async needs: [batch..., T, W] rows, or
// [batch..., T] (`rowsAreLast`, the log-sum-exp).
bool attentionRowsAligned(const StridedView& view, const Shape& s, int64_t bytes, bool rowsAreLast);

// attentionSimtReason and every operand's rows aligned, the operands read through their view
// chains (resolveView) as the planner sees them: "" when tensor cores take `att`.
std::string attentionTensorCoreBlocker(const Op& att);

}  // namespace fusec
