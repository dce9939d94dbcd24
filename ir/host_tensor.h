// Tensors on the host: a typed tensor's values in CPU memory, the currency of the interpreter
// (its bindings and results), the runtime's uploads and downloads, and safetensors files; and
// rounding to the float dtypes, which every one of them shares. Kept apart from the
// interpreter so that the runtime and the file readers need not include it.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/error.h"
#include "ir/types.h"

namespace fusec {

struct HostTensor {
  Type type;
  std::vector<float> f;    // float dtypes (values already rounded to the dtype)
  std::vector<int64_t> i;  // i64, i32, bool

  static HostTensor zeros(const Type& t);
  size_t size() const { return size_t(type.numel()); }
  double get(size_t k) const { return isFloat(type.dtype) ? double(f[k]) : double(i[k]); }
  void set(size_t k, double v);  // rounds/truncates to the dtype
};

// Input and param values, by their `name` attribute.
using Bindings = std::map<std::string, HostTensor>;

float roundToBF16(float x);  // round to nearest even, NaN preserved
float roundToF16(float x);
float roundToDType(float x, DType d);  // identity for f32

// A double rounded to the float dtype `d`, ties to even, with subnormals and overflow to
// +-inf (one rounding: correctly rounded).
float roundDouble(double x, DType d);
// An int64 converted to the float dtype `d` with a single rounding.
float intToFloat(int64_t v, DType d);
// A double converted to the integer or bool dtype `d`: truncation toward zero; NaN, inf and
// out-of-range values throw Error; to bool it is x != 0.
int64_t floatToInt(double x, DType d);

}  // namespace fusec
