// How IR dtypes and values are spelled in generated CUDA: storage types (kernel_abi.h),
// register types (bf16/f16 computed in float), literals, loads and stores.
#pragma once
#include <string>

#include "ir/types.h"

namespace fusec::codegen {

std::string storageType(DType d);   // float, __nv_bfloat16, __half, long long, int, bool
std::string registerType(DType d);  // float for every float dtype
bool isReduced(DType d);            // bf16, f16: stored narrower than they are computed
// `x` (a register value of dtype d) rounded to d, still a register value.
std::string roundTo(DType d, const std::string& x);
// A register value read from / the storage form written to `ptr[index]`.
std::string loadExpr(DType d, const std::string& ptr, const std::string& index);
std::string storeValue(DType d, const std::string& reg);
// A literal of dtype d with value v, as the interpreter reads a constant.
std::string literal(DType d, double v);

}  // namespace fusec::codegen
