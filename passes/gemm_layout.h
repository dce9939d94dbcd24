// gemm-layout: permutes around GEMMs become transpose flags, strided operands or out_perm,
// so no transpose copy is left next to a matmul. See passes/gemm_layout.cpp.
#pragma once
#include <vector>

#include "ir/graph.h"

namespace fusec {

// True when a GEMM can read matmul operand `v` in place: its view chain resolves
// (resolveView) and the matrix dims are row- or column-major (gemmReadable).
bool gemmReadableOperand(const Value* v);

// The matmuls of `g` (top level) with an operand a GEMM cannot read in place, once per such
// operand: after gemm-layout these are the copies fuse will have to materialise.
std::vector<const Op*> unreadableGemmOperands(const Graph& g);

}  // namespace fusec
