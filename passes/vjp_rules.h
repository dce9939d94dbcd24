// The derivative side of ir/ops.def: for each op, which operands can carry a gradient and the
// rule that builds its vector-Jacobian product, in one table (passes/vjp_rules.cpp) that
// autodiff reads. A rule receives the op, the adjoint dy of its result, and a Vjp: the
// Builder that appends to the graph, `give` (adds a VJP to an operand's adjoint, built only
// if that operand needs one) and the building blocks the rules share. Every VJP is made of
// primitive ops, except rope's (rope by the negated positions, the inverse rotation),
// dropout's (the same mask) and attention's (the attention_backward composite); matmul VJPs
// stay GEMM-shaped, their transposes matmul flags.
#pragma once
#include <vector>

#include "ir/builder.h"
#include "ir/graph.h"

namespace fusec {

// Which operands of an op can carry a gradient.
enum class GradSlots {
  All,
  None,          // compares, boolean ops, stop_gradient, uniform: their results are constants to it
  AllButFirst,   // select (not its condition)
  OnlyFirst,     // gather (not its index), rope (not the positions), dropout (not the key), cross_entropy
  AllButSecond,  // scatter_add (not its index)
};

class Vjp {
 public:
  explicit Vjp(Graph& g) : b(g) {}
  virtual ~Vjp() = default;

  // Whether operand i of op needs a gradient (it carries one and lies between wrt and loss).
  virtual bool wants(const Op& op, size_t i) const = 0;
  // Adds make() to the adjoint of operand i of op, building it only if that operand wants one.
  template <class F>
  void give(const Op& op, size_t i, F&& make) {
    if (wants(op, i)) accumulate(op, i, make());
  }

  Builder b;

  // Building blocks.
  Value* zeros(const Type& t) { return b.constant(0.0, t); }
  Value* c(double v, const Value* like) { return b.constant(v, like->type); }
  Value* add(Value* x, Value* y) { return b.binary(OpKind::Add, x, y); }
  Value* sub(Value* x, Value* y) { return b.binary(OpKind::Sub, x, y); }
  Value* mul(Value* x, Value* y) { return b.binary(OpKind::Mul, x, y); }
  Value* div(Value* x, Value* y) { return b.binary(OpKind::Div, x, y); }
  Value* neg(Value* x) { return b.unary(OpKind::Neg, x); }
  Value* sel(Value* cond, Value* x, Value* y) { return b.select(cond, x, y); }
  Value* reshape(Value* v, const Shape& s) { return v->type.shape == s ? v : b.reshape(v, s); }
  Value* bcast(Value* v, const Shape& s) { return v->type.shape == s ? v : b.broadcast(v, s); }
  Value* sum(Value* v, std::vector<int64_t> axes, bool keepdim) {
    return axes.empty() ? v : b.reduce(OpKind::Sum, v, std::move(axes), keepdim);
  }
  Value* mm(Value* x, Value* y, bool ta, bool tb) { return b.matmul(x, y, ta, tb); }
  // Sum over the last axis, kept as size 1, broadcast back.
  Value* rowSum(Value* v);
  // Softmax over the last axis, in primitives (max-subtracted).
  Value* softmaxLast(Value* x);

 protected:
  virtual void accumulate(const Op& op, size_t i, Value* d) = 0;
};

using VjpRule = void (*)(Vjp&, const Op&, Value* dy);

struct VjpEntry {
  GradSlots slots = GradSlots::All;
  VjpRule rule = nullptr;  // nullptr: no derivative (the op is refused on a path to the loss)
};

// The op's entry; an op the table does not list has all slots and no rule.
const VjpEntry& vjpEntry(OpKind k);
// Whether operand i of op can carry a gradient.
bool carriesGradient(const Op& op, size_t i);

}  // namespace fusec
