// Builds IR with shape/dtype inference: every method checks its operands and throws Error
// with a precise one-line message on a bad combination.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace fusec {

using NamedAttrs = std::vector<std::pair<std::string, AttrValue>>;

class Builder {
 public:
  explicit Builder(Graph& g) : g_(g) {}
  Graph& graph() { return g_; }

  // Generic creation: attributes by name (missing ones take their defaults; a required one
  // missing is an error); `declared` result types for rules that need them.
  std::vector<Value*> create(OpKind kind, std::vector<Value*> operands, const NamedAttrs& attrs = {},
                             std::vector<Type> declared = {}, std::unique_ptr<Graph> body = nullptr);
  Value* create1(OpKind kind, std::vector<Value*> operands, const NamedAttrs& attrs = {},
                 std::vector<Type> declared = {}) {
    return create(kind, std::move(operands), attrs, std::move(declared)).at(0);
  }

  Value* input(const std::string& name, Type t);
  Value* param(const std::string& name, Type t);
  Value* constant(double value, Type t);  // a splat of `value`
  Value* iota(int64_t axis, Type t);

  Value* unary(OpKind k, Value* a) { return create1(k, {a}); }
  Value* binary(OpKind k, Value* a, Value* b) { return create1(k, {a, b}); }
  Value* select(Value* c, Value* a, Value* b) { return create1(OpKind::Select, {c, a, b}); }
  Value* cast(Value* a, DType d);
  Value* reduce(OpKind k, Value* a, std::vector<int64_t> axes, bool keepdim = false);
  Value* reshape(Value* a, Shape s);
  Value* permute(Value* a, std::vector<int64_t> perm);
  Value* broadcast(Value* a, Shape s);
  Value* slice(Value* a, int64_t axis, int64_t start, int64_t end, int64_t step = 1);
  Value* concat(std::vector<Value*> xs, int64_t axis);
  Value* gather(Value* x, Value* idx, int64_t axis);
  Value* scatterAdd(Value* base, Value* idx, Value* src, int64_t axis);
  Value* matmul(Value* a, Value* b, bool transposeA = false, bool transposeB = false);

  void output(Value* v) { g_.outputs.push_back(v); }

 private:
  Graph& g_;
};

}  // namespace fusec
