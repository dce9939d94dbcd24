// Element types and tensor types of the fusec IR.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "ir/shape.h"

namespace fusec {

// The most elements one tensor may have (2^48: 1 PiB of f32), checked with overflow-checked
// arithmetic wherever a shape comes from outside (the .fir parser, the CLI's model sizes), so
// that no product of dimensions wraps around.
constexpr int64_t kMaxElements = int64_t(1) << 48;
// The element count of `dims`, or -1 when it passes kMaxElements (or a product overflows).
int64_t checkedNumel(std::initializer_list<int64_t> dims);

enum class DType : uint8_t { f32, bf16, f16, i64, i32, boolean };

std::string_view dtypeName(DType d);                 // "f32", ..., "bool"
bool parseDType(std::string_view s, DType& out);     // inverse of dtypeName
bool isFloat(DType d);                               // f32, bf16, f16
bool isInt(DType d);                                 // i64, i32
int dtypeBytes(DType d);

// A tensor type: element type and static shape. Rank 0 is a scalar.
struct Type {
  DType dtype = DType::f32;
  Shape shape;

  int rank() const { return int(shape.size()); }
  int64_t numel() const;
  bool operator==(const Type& o) const { return dtype == o.dtype && shape == o.shape; }
  bool operator!=(const Type& o) const { return !(*this == o); }
  std::string str() const;  // "f32[4,256]", "f32[]"
};

std::string shapeStr(const Shape& s);  // "[4,256]"

}  // namespace fusec
