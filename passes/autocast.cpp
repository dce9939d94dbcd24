// The `autocast` pass: PyTorch CUDA autocast's bf16 policy, applied to the forward/loss graph
// before autodiff, so that the backward's dtypes follow from the VJPs (the VJP of a cast is
// a cast back) exactly as torch's autograd records them.
//
//   matmul (and the attention composites) operands cast to bf16, result bf16; accumulating
//                                         in f32 is the GEMM's business (attention's lse
//                                         and attention_backward's lse operand stay f32).
//   sum, mean, reduce_max, reduce_min     computed in f32 (the operand is cast up).
//   softmax, log_softmax, rmsnorm,        torch's fp32 list: float operands cast to f32,
//   layernorm, cross_entropy, rope        result f32 (rope: the CS336 rope multiplies by f32
//                                         cos/sin buffers, so it runs in f32).
//   pointwise ops, concat, scatter_add    promote to the widest *strong* float operand. A
//                                         `constant`/`iota`, or a layout chain of one, is
//                                         weak (a Python scalar to torch) and takes the
//                                         other operands' dtype; explicit casts keep theirs.
//   other layout ops, gather, silu, gelu  keep (follow) their operand's dtype.
//   anything else (kernel ops)            operands cast back to their original dtypes.
//
// Params and inputs stay as declared (f32 master weights). One cast per (value, dtype) is
// shared by all users; a weak constant is re-emitted at the new dtype instead of cast.
// Outputs keep the dtype the policy gives them (bf16 logits, f32 loss), except in-place
// updates, which must keep their param's dtype.
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "ir/type_rules.h"
#include "passes/pass.h"
#include "support/ptr_hash.h"

namespace fusec {
namespace {

constexpr DType kLow = DType::bf16;

// The float dtype both a and b convert to without loss of range (torch's promotion).
DType widest(DType a, DType b) {
  if (a == b) return a;
  return DType::f32;  // f32 with anything, or bf16 with f16
}

class Autocast {
 public:
  explicit Autocast(Graph& g) : g_(g) {}

  bool run() {
    std::vector<std::unique_ptr<Op>> ops = std::move(g_.ops);
    g_.ops.clear();
    for (auto& op : ops) {
      apply(*op);
      g_.ops.push_back(std::move(op));
    }
    // An in-place update overwrites its param's storage, so it keeps the param's dtype.
    for (size_t i = 0; i < g_.outputs.size(); ++i)
      if (!g_.updateOf(i).empty()) g_.outputs[i] = as(g_.outputs[i], originalType(g_.outputs[i]).dtype);
    return changed_;
  }

 private:
  const Type& originalType(const Value* v) const {
    auto it = original_.find(v);
    return it == original_.end() ? v->type : it->second;
  }

  // `v` as dtype `d` (float values only; others are returned as they are).
  Value* as(Value* v, DType d) {
    if (v->type.dtype == d || !isFloat(v->type.dtype)) return v;
    auto key = std::make_pair(v, d);
    if (auto it = casts_.find(key); it != casts_.end()) return it->second;
    const Type t{d, v->type.shape};
    std::unique_ptr<Op> op;
    if (v->def && v->def->kind == OpKind::Constant) {
      op = makeOp(OpKind::Constant);
      op->setAttr("value", v->def->attrFloat("value"));
    } else {
      op = makeOp(OpKind::Cast);
      op->operands = {v};
    }
    auto r = std::make_unique<Value>();
    r->type = t;
    r->def = op.get();
    op->results.push_back(std::move(r));
    Value* out = op->result();
    if (op->kind == OpKind::Constant) weak_.insert(out);
    g_.ops.push_back(std::move(op));
    changed_ = true;
    return casts_[key] = out;
  }

  void castFloatOperands(Op& op, DType d) {
    for (Value*& v : op.operands) v = as(v, d);
  }

  // The widest dtype among the strong float operands; nullopt when there is none.
  std::optional<DType> strongDType(const Op& op) const {
    std::optional<DType> d;
    for (const Value* v : op.operands)
      if (isFloat(v->type.dtype) && !weak_.count(v)) d = d ? widest(*d, v->type.dtype) : v->type.dtype;
    return d;
  }

  void promote(Op& op) {
    if (auto d = strongDType(op)) castFloatOperands(op, *d);
  }

  void composite(Op& op) {
    switch (op.kind) {
      case OpKind::Softmax:
      case OpKind::LogSoftmax:
      case OpKind::RMSNorm:
      case OpKind::LayerNorm:
      case OpKind::CrossEntropy:
      case OpKind::Rope: return castFloatOperands(op, DType::f32);
      case OpKind::Attention: return castFloatOperands(op, kLow);
      case OpKind::AttentionBackward:  // q, k, v, o, do in bf16; the lse stays f32
        for (size_t i = 0; i < 5; ++i) op.operands[i] = as(op.operands[i], kLow);
        return;
      default: return promote(op);  // silu, gelu: unary, they follow their operand
    }
  }

  void apply(Op& op) {
    switch (op.info().category) {
      case OpCategory::Source:
        if (op.kind == OpKind::Constant || op.kind == OpKind::Iota) weak_.insert(op.result());
        return;
      case OpCategory::Pointwise:
        if (op.kind != OpKind::Cast) promote(op);
        break;
      case OpCategory::Reduction: castFloatOperands(op, DType::f32); break;
      case OpCategory::Layout:
        if (op.kind == OpKind::Concat || op.kind == OpKind::ScatterAdd) promote(op);
        break;
      case OpCategory::Matmul: castFloatOperands(op, kLow); break;
      case OpCategory::Composite: composite(op); break;
      default:
        for (Value*& v : op.operands) v = as(v, originalType(v).dtype);
        break;
    }
    retype(op);
    if (op.info().category == OpCategory::Layout && op.kind != OpKind::Gather && op.kind != OpKind::Concat &&
        op.kind != OpKind::ScatterAdd && weak_.count(op.operands.at(0)))
      weak_.insert(op.result());
  }

  // Re-infers the result types from the (possibly recast) operands.
  void retype(Op& op) {
    std::vector<Type> in, declared;
    for (Value* v : op.operands) in.push_back(v->type);
    for (auto& r : op.results) declared.push_back(r->type);
    if (op.kind == OpKind::Reshape || op.kind == OpKind::Broadcast) declared.at(0).dtype = in.at(0).dtype;
    std::vector<Type> types = inferResultTypes(op.info(), in, op.attrs, declared, op.body.get());
    for (size_t i = 0; i < types.size(); ++i) {
      Value* r = op.result(int(i));
      if (r->type == types[i]) continue;
      original_.try_emplace(r, r->type);
      r->type = types[i];
      changed_ = true;
    }
  }

  Graph& g_;
  bool changed_ = false;
  std::map<std::pair<Value*, DType>, Value*> casts_;
  PtrMap<const Value*, Type> original_;  // values whose dtype the policy changed
  PtrSet<const Value*> weak_;
};

bool autocastGraph(Graph& g) { return Autocast(g).run(); }

}  // namespace

std::unique_ptr<Pass> createAutocastPass() { return std::make_unique<FunctionPass>("autocast", &autocastGraph); }

}  // namespace fusec
