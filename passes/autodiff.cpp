// Reverse-mode automatic differentiation (see passes/autodiff.h).
//
// A value carries a gradient when it lies on a path from some `wrt` value to the loss through
// differentiable operand slots: not select's condition, gather's and scatter_add's index,
// rope's positions or cross_entropy's targets; compare and bool ops pass none (their results
// are constants to the gradient), nor does stop_gradient (that is its purpose). The ops defining such values are visited in reverse
// topological order, and each adds the vector-Jacobian product of its result's adjoint to
// the adjoints of its differentiable operands (fan-out accumulates with add). Which slots
// carry a gradient and each op's VJP rule are one table, passes/vjp_rules.h; the VJPs are
// appended at the end of the graph.
#include "passes/autodiff.h"

#include <cstdlib>
#include <optional>
#include <string>

#include "ir/numbering.h"
#include "ir/op_table.h"
#include "passes/vjp_rules.h"

namespace fusec {
namespace {

std::string opName(const Op& op) { return std::string(op.info().name); }

// Tables by value number of the graph as it was before the VJPs were appended (`numbers`):
// only its values are ever looked up (operands and results of the ops being differentiated,
// the loss, the wrt values). Hash sets keyed by address here grew faster than the graph
// (issue 39: autodiff's instructions grew 14x for 4x the layers).
class Autodiff : public Vjp {
 public:
  Autodiff(Graph& g, const GraphNumbering& numbers, std::vector<char> needed)
      : Vjp(g), numbers_(numbers), needed_(std::move(needed)), adj_(numbers.numValues(), nullptr) {
    // A test's planted fault (tests/python/export_verify_test.py): FUSEC_TEST_WRONG_VJP=OP
    // doubles every VJP of op OP, so that the checks downstream (the exporter's gradient
    // check) are shown to catch a wrong derivative rule. Unset, nothing changes.
    if (const char* name = std::getenv("FUSEC_TEST_WRONG_VJP"); name && *name)
      if (const OpInfo* info = findOp(name)) planted_ = info->kind;
  }

  void seed(Value* v, Value* adjoint) { adj_[numbers_.of(v)] = adjoint; }

  Value* adjoint(const Value* v) const { return adj_[numbers_.of(v)]; }

  // Adds the VJPs of `op` (whose result has adjoint `dy`) to its operands' adjoints.
  void backprop(const Op& op, Value* dy) {
    if (op.kind == OpKind::Kernel)
      throw Error("autodiff: kernel '" + op.attrStr("name") + "' on the path to the loss has no derivative");
    for (size_t i = 0; i < op.operands.size(); ++i)
      if (wants(op, i) && !isFloat(op.operands[i]->type.dtype))
        throw Error("autodiff: '" + opName(op) + "' has no derivative with respect to its operand " +
                    std::to_string(i) + " of type " + op.operands[i]->type.str() +
                    " (an integer-valued path to the loss)");
    if (!isFloat(op.result()->type.dtype))
      throw Error("autodiff: '" + opName(op) + "' has no derivative: its result " + op.result()->type.str() +
                  " is not a float type (an integer-valued path to the loss)");
    const VjpRule rule = vjpEntry(op.kind).rule;
    if (!rule) throw Error("autodiff: '" + opName(op) + "' has no derivative");
    rule(*this, op, dy);
  }

  bool wants(const Op& op, size_t i) const override {
    return carriesGradient(op, i) && needed_[numbers_.of(op.operands[i])] != 0;
  }

 private:
  void accumulate(const Op& op, size_t i, Value* d) override {
    if (planted_ == op.kind) d = add(d, d);
    Value*& a = adj_[numbers_.of(op.operands[i])];
    a = a ? add(a, d) : d;
  }

  std::optional<OpKind> planted_;  // FUSEC_TEST_WRONG_VJP's op, if any
  const GraphNumbering& numbers_;
  std::vector<char> needed_;  // by value number: carries a gradient from a wrt value to the loss
  std::vector<Value*> adj_;   // by value number: the adjoint so far, or null
};

// The gradients of `loss` w.r.t. `wrt` with d(loss) = seed() (built only if some wrt value
// depends on the loss).
template <class Seed>
std::vector<Value*> gradients(Graph& g, Value* loss, const std::vector<Value*>& wrt, Seed&& seed) {
  const GraphNumbering numbers(g);
  std::vector<Op*> ops;
  ops.reserve(g.ops.size());
  for (auto& op : g.ops) ops.push_back(op.get());
  if (!numbers.contains(loss->def)) throw Error("autodiff: the loss is not defined in graph '" + g.name + "'");
  for (size_t i = 0; i < wrt.size(); ++i)
    if (!wrt[i] || !numbers.contains(wrt[i]->def))
      throw Error("autodiff: wrt value " + std::to_string(i) + " is not defined in graph '" + g.name + "'");

  // Needed: reachable from a wrt value (forward) and reaching the loss (backward), both
  // through differentiable operand slots only. By value number.
  std::vector<char> fromWrt(numbers.numValues(), 0), toLoss(numbers.numValues(), 0);
  for (const Value* w : wrt) fromWrt[numbers.of(w)] = 1;
  for (Op* op : ops) {
    bool reached = false;
    for (size_t i = 0; i < op->operands.size() && !reached; ++i)
      reached = carriesGradient(*op, i) && fromWrt[numbers.of(op->operands[i])];
    if (reached)
      for (auto& r : op->results) fromWrt[numbers.of(r.get())] = 1;
  }
  toLoss[numbers.of(loss)] = 1;
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
    Op* op = *it;
    bool reaches = false;
    for (auto& r : op->results) reaches = reaches || toLoss[numbers.of(r.get())];
    if (!reaches) continue;
    for (size_t i = 0; i < op->operands.size(); ++i)
      if (carriesGradient(*op, i)) toLoss[numbers.of(op->operands[i])] = 1;
  }
  std::vector<char> needed(numbers.numValues(), 0);
  for (size_t v = 0; v < needed.size(); ++v) needed[v] = char(fromWrt[v] && toLoss[v]);
  auto isNeeded = [&](const Value* v) { return needed[numbers.of(v)] != 0; };

  Autodiff ad(g, numbers, needed);
  if (isNeeded(loss)) {
    ad.seed(loss, seed(ad.b));
    for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
      const Op& op = **it;
      if (op.operands.empty()) continue;
      Value* dy = nullptr;
      bool any = false;
      for (auto& r : op.results) any = any || isNeeded(r.get());
      if (!any) continue;
      if (op.kind != OpKind::Kernel) dy = ad.adjoint(op.result());
      if (op.kind != OpKind::Kernel && !dy) continue;
      ad.backprop(op, dy);
    }
  }

  std::vector<Value*> grads;
  grads.reserve(wrt.size());
  for (Value* w : wrt) {
    Value* d = ad.adjoint(w);
    grads.push_back(d ? d : ad.zeros(w->type));
  }
  return grads;
}

}  // namespace

std::vector<Value*> appendGradients(Graph& g, Value* loss, const std::vector<Value*>& wrt) {
  if (!loss) throw Error("autodiff: the loss is null");
  if (loss->type.rank() != 0 || !isFloat(loss->type.dtype))
    throw Error("autodiff: the loss must be a float scalar, got " + loss->type.str());
  return gradients(g, loss, wrt, [&](Builder& b) { return b.constant(1.0, loss->type); });
}

std::vector<Value*> appendVjp(Graph& g, Value* out, Value* cotangent, const std::vector<Value*>& wrt) {
  if (!out || !cotangent) throw Error("autodiff: the output or its cotangent is null");
  if (!isFloat(out->type.dtype)) throw Error("autodiff: the output must be a float tensor, got " + out->type.str());
  if (cotangent->type.shape != out->type.shape || !isFloat(cotangent->type.dtype))
    throw Error("autodiff: the cotangent " + cotangent->type.str() + " must have its output's shape, " + out->type.str());
  // autocast may have narrowed the output (bf16 where the traced one was f32): the cotangent
  // narrows with it, as the VJP of the cast back to the traced dtype would.
  return gradients(g, out, wrt, [&](Builder& b) {
    return cotangent->type.dtype == out->type.dtype ? cotangent : b.cast(cotangent, out->type.dtype);
  });
}

}  // namespace fusec
