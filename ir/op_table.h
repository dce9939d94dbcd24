// Typed view of ir/ops.def: one OpInfo per operation kind.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace fusec {

enum class OpKind : uint16_t {
#define FIR_OP(Id, Text, Category, Rule, Arity, Attrs) Id,
#define FIR_POINTWISE(Id, Text, Rule, Arity, Expr) Id,
#include "ir/ops.def"
};

// How many op kinds there are, for tables indexed by OpKind.
constexpr size_t kOpKindCount = 0
#define FIR_OP(Id, Text, Category, Rule, Arity, Attrs) +1
#define FIR_POINTWISE(Id, Text, Rule, Arity, Expr) +1
#include "ir/ops.def"
    ;

enum class OpCategory : uint8_t { Source, Pointwise, Reduction, Layout, Matmul, Composite, Fused, Collective };

// Type rules implemented in ir/type_rules.cpp.
enum class TypeRule : uint8_t {
  Declared, Iota, UnaryNumeric, UnaryFloat, UnaryBool, BinaryNumeric, BinaryFloat, BinaryBool,
  Compare, Select, Cast, ReduceNumeric, ReduceFloat, Reshape, Permute, Broadcast, Slice, Concat,
  Gather, ScatterAdd, Matmul, SoftmaxLike, RMSNorm, Rope, CrossEntropy, Attention, AttentionBackward, LayerNorm,
  Uniform, Dropout,
  Kernel, AllReduce, ReduceScatter, AllGather, Shard
};

enum class AttrKind : uint8_t { Int, Ints, Float, Bool, Str };
std::string_view attrKindName(AttrKind k);

using AttrValue = std::variant<int64_t, std::vector<int64_t>, double, bool, std::string>;

struct AttrSpec {
  std::string name;
  AttrKind kind;
  std::optional<AttrValue> defaultValue;  // absent: the attribute is required
};

struct OpInfo {
  OpKind kind;
  std::string_view name;
  OpCategory category;
  TypeRule rule;
  int arity;  // -1: variadic
  std::vector<AttrSpec> attrs;
  bool costly = false;  // FIR_COSTLY in ops.def

  int attrIndex(std::string_view attr) const;  // -1 if the op has no such attribute
};

const OpInfo& opInfo(OpKind k);
const OpInfo* findOp(std::string_view name);  // by text name; nullptr if unknown
const std::vector<OpInfo>& allOps();
std::string_view categoryName(OpCategory c);

bool attrValueMatches(const AttrValue& v, AttrKind k);

}  // namespace fusec
