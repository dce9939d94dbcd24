#include "ir/types.h"

namespace fusec {

std::string_view dtypeName(DType d) {
  switch (d) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::boolean: return "bool";
  }
  return "?";
}

bool parseDType(std::string_view s, DType& out) {
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::i64, DType::i32, DType::boolean})
    if (dtypeName(d) == s) { out = d; return true; }
  return false;
}

bool isFloat(DType d) { return d == DType::f32 || d == DType::bf16 || d == DType::f16; }
bool isInt(DType d) { return d == DType::i64 || d == DType::i32; }

int dtypeBytes(DType d) {
  switch (d) {
    case DType::f32: case DType::i32: return 4;
    case DType::bf16: case DType::f16: return 2;
    case DType::i64: return 8;
    case DType::boolean: return 1;
  }
  return 0;
}

int64_t checkedNumel(std::initializer_list<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > kMaxElements) return -1;
  return n;
}

int64_t Type::numel() const {
  uint64_t n = 1;  // unsigned: a hostile shape wraps instead of overflowing (the parser bounds shapes)
  for (int64_t d : shape) n *= uint64_t(d);
  return int64_t(n);
}

std::string shapeStr(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ",";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

std::string Type::str() const { return std::string(dtypeName(dtype)) + shapeStr(shape); }

}  // namespace fusec
