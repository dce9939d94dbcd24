// CPU reference interpreter for every op, fused kernel bodies included. It is the oracle
// for passes and, later, for generated kernels: f32 arithmetic in float with double
// accumulators for reductions and matmul; bf16/f16 emulated by rounding every result to
// nearest-even; integer and bool values held as int64.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"

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

// Evaluates `g`; returns one tensor per graph output. Throws Error on a missing or
// mistyped binding or an out-of-range index.
std::vector<HostTensor> interpret(const Graph& g, const Bindings& env);

float roundToBF16(float x);  // round to nearest even, NaN preserved
float roundToF16(float x);
float roundToDType(float x, DType d);  // identity for f32

}  // namespace fusec
