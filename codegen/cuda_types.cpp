#include "codegen/cuda_types.h"

#include <cmath>
#include <cstdio>

namespace fusec::codegen {

std::string storageType(DType d) {
  switch (d) {
    case DType::f32: return "float";
    case DType::bf16: return "__nv_bfloat16";
    case DType::f16: return "__half";
    case DType::i64: return "long long";
    case DType::i32: return "int";
    case DType::boolean: return "bool";
  }
  return "?";
}

std::string registerType(DType d) { return isFloat(d) ? "float" : storageType(d); }

bool isReduced(DType d) { return d == DType::bf16 || d == DType::f16; }

std::string roundTo(DType d, const std::string& x) {
  if (d == DType::bf16) return "__bfloat162float(__float2bfloat16_rn(" + x + "))";
  if (d == DType::f16) return "__half2float(__float2half_rn(" + x + "))";
  return x;
}

std::string loadExpr(DType d, const std::string& ptr, const std::string& index) {
  std::string e = ptr + "[" + index + "]";
  if (d == DType::bf16) return "__bfloat162float(" + e + ")";
  if (d == DType::f16) return "__half2float(" + e + ")";
  return e;
}

std::string storeValue(DType d, const std::string& reg) {
  if (d == DType::bf16) return "__float2bfloat16_rn(" + reg + ")";
  if (d == DType::f16) return "__float2half_rn(" + reg + ")";
  return reg;
}

std::string literal(DType d, double v) {
  if (d == DType::boolean) return v != 0 ? "true" : "false";
  if (isInt(d)) return std::to_string(int64_t(v)) + (d == DType::i64 ? "LL" : "");
  if (std::isnan(v)) return "__int_as_float(0x7fc00000)";
  if (std::isinf(v)) return v > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  // The f32 nearest to v (as the interpreter stores a constant), printed exactly.
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9gf", double(float(v)));
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s.insert(s.size() - 1, ".0");
  return roundTo(d, s);
}

}  // namespace fusec::codegen
