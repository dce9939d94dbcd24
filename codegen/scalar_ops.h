// The scalar formula of each pointwise op, as C++ text: FIR_POINTWISE's Expr from
// ir/ops.def, stringized, with its operands a, b, c replaced. The table is never restated.
#pragma once
#include <string>
#include <vector>

#include "ir/op_table.h"

namespace fusec::codegen {

bool hasScalarFormula(OpKind k);
// The formula of `k` over the given operand expressions. Throws Error for an op without one.
std::string scalarFormula(OpKind k, const std::vector<std::string>& operands);

}  // namespace fusec::codegen
