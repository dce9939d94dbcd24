// The scalar formula of each pointwise op, as C++ text: FIR_POINTWISE's Expr from
// ir/ops.def, stringized, with its operands a, b, c replaced. The table is never restated;
// a few ops have faster forms for low-precision results, listed in scalar_ops.cpp.
#pragma once
#include <string>
#include <vector>

#include "ir/op_table.h"

namespace fusec::codegen {

bool hasScalarFormula(OpKind k);
// The formula of `k` over the given operand expressions. Throws Error for an op without one.
// `lowPrecision` (the result is bf16/f16) selects the hardware approximations of exp,
// sigmoid, division, recip and rsqrt, which are exact enough for 8 or 11 bits.
std::string scalarFormula(OpKind k, const std::vector<std::string>& operands, bool lowPrecision = false);
// Whether `k` has such a hardware form (a few instructions where the accurate one takes a dozen).
bool hasLowPrecisionFormula(OpKind k);

}  // namespace fusec::codegen
