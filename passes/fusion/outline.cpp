#include "passes/fusion/outline.h"

#include <functional>
#include <optional>
#include <unordered_map>

#include "passes/fusion/kernel_family.h"
#include "support/ptr_hash.h"

namespace fusec::fusion {
namespace {

std::unique_ptr<Op> cloneWith(const Op& op, std::vector<Value*> operands) {
  auto c = std::make_unique<Op>();
  c->kind = op.kind;
  c->attrs = op.attrs;
  c->loc = op.loc;
  c->operands = std::move(operands);
  for (auto& r : op.results) {
    auto v = std::make_unique<Value>(*r);
    v->offset = -1;
    c->results.push_back(std::move(v));
  }
  return c;
}

class Outliner {
 public:
  Outliner(Graph& g, const Plan& plan)
      : g_(g), plan_(plan), numbers_(plan.numbers), owned_(numbers_.numOps()), top_(numbers_.numValues()),
        original_(numbers_.numOps()) {
    for (auto& op : g.ops) owned_[numbers_.of(op.get())] = std::move(op);
  }
  Outliner(const Outliner&) = delete;
  Outliner& operator=(const Outliner&) = delete;

  void run() {
    // Sources first, in their original order (they read nothing).
    std::vector<Op*> sources;
    for (auto& node : plan_.order)
      if (node.fixed && (node.fixed->kind == OpKind::Input || node.fixed->kind == OpKind::Param))
        sources.push_back(node.fixed);
    for (Op* s : sources) emitTop(s);
    int n = 0;
    for (auto& node : plan_.order) {
      if (node.fixed) emitTop(node.fixed);
      else buildKernel(plan_.kernels[size_t(node.kernel)], n++);
    }
    for (Value*& v : g_.outputs) v = top(v);
    g_.ops = std::move(out_);
  }

 private:
  // Moves an original op to the new top level (once), its operands first.
  void emitTop(Op* op) {
    std::unique_ptr<Op>& slot = owned_[numbers_.of(op)];
    if (!slot) return;  // already emitted
    std::unique_ptr<Op> p = std::move(slot);
    // A top-level op that kernels also recompute (plan_.inlined) is cloned into them from its
    // original operands, not the top-level ones it gets here (which may be kernel results).
    if (plan_.inlined(p.get())) original_[numbers_.of(p.get())] = p->operands;
    for (Value*& v : p->operands) v = top(v);
    for (auto& r : p->results) top_[numbers_.of(r.get())] = r.get();
    out_.push_back(std::move(p));
  }

  // The top-level value standing for original value `v`.
  Value* top(Value* v) {
    if (Value* t = top_[numbers_.of(v)]) return t;
    if (!plan_.keptTop(v->def))
      throw Error("internal: fuse left value " + (v->name.empty() ? std::string("?") : "%" + v->name) +
                  " without a top-level definition");
    emitTop(v->def);
    if (Value* t = top_[numbers_.of(v)]) return t;
    throw Error("internal: fuse emitted the definition of " + (v->name.empty() ? std::string("?") : "%" + v->name) +
                " without its top-level value");
  }

  void buildKernel(const Plan::Kernel& k, int index) {
    PtrMap<const Op*, bool> member;
    for (Op* m : k.members) member[m] = true;
    std::vector<std::unique_ptr<Op>> inputs, ops;
    std::vector<Value*> operands;
    PtrMap<const Value*, Value*> inBody;
    std::function<Value*(Value*)> get = [&](Value* v) -> Value* {
      if (auto it = inBody.find(v); it != inBody.end()) return it->second;
      Op* d = v->def;
      if (member.count(d)) throw Error("internal: fuse member used before its definition");
      std::unique_ptr<Op> c;
      if (plan_.inlined(d)) {  // recomputed here
        std::vector<Value*> xs;
        const std::optional<OperandList>& orig = original_[numbers_.of(d)];
        for (Value* o : orig ? *orig : d->operands) xs.push_back(get(o));
        c = cloneWith(*d, std::move(xs));
        ops.push_back(std::move(c));
        Op* placed = ops.back().get();
        for (auto& r : placed->results) r->def = placed;
        return inBody[v] = placed->result(v->index);
      }
      c = makeOp(OpKind::Input);
      c->setAttr("name", "in" + std::to_string(inputs.size()));
      auto r = std::make_unique<Value>();
      r->type = v->type;
      r->name = v->name;
      r->def = c.get();
      c->results.push_back(std::move(r));
      operands.push_back(top(v));
      inputs.push_back(std::move(c));
      return inBody[v] = inputs.back()->result();
    };
    for (Op* m : k.members) {
      std::vector<Value*> xs;
      for (Value* o : m->operands) xs.push_back(get(o));
      ops.push_back(cloneWith(*m, std::move(xs)));
      Op* placed = ops.back().get();
      for (auto& r : m->results) inBody[r.get()] = placed->result(r->index);
    }
    auto body = std::make_unique<Graph>();
    for (auto& op : inputs) body->append(std::move(op));
    for (auto& op : ops) body->append(std::move(op));
    for (Value* v : k.results) body->outputs.push_back(inBody.at(v));
    const KernelFamily family = classifyKernel(*body);
    // The plan knows an optimizer group even when it holds one shape (a pointwise kernel).
    const std::string hint = k.domain.kind == DomainKind::Multi ? "adamw" : kernelHint(*body, family);
    body->name = std::string(familyName(family)) + "_" + std::to_string(index) + "_" + hint;

    auto kernel = makeOp(OpKind::Kernel);
    kernel->setAttr("name", body->name);
    kernel->operands = std::move(operands);
    for (Value* v : k.results) {
      auto r = std::make_unique<Value>();
      r->type = v->type;
      r->name = v->name;
      kernel->results.push_back(std::move(r));
    }
    kernel->body = std::move(body);
    recordKernelFamily(*kernel, family, hint);  // decided here, once: codegen and the profile read it
    for (size_t i = 0; i < k.results.size(); ++i) top_[numbers_.of(k.results[i])] = kernel->result(int(i));
    Op* placed = kernel.get();
    out_.push_back(std::move(kernel));
    for (size_t i = 0; i < placed->results.size(); ++i) {
      placed->results[i]->def = placed;
      placed->results[i]->index = int(i);
    }
  }

  Graph& g_;
  const Plan& plan_;
  const GraphNumbering& numbers_;  // the planner's: the original ops and values
  std::vector<std::unique_ptr<Op>> owned_;                   // by op number, until emitted
  std::vector<Value*> top_;                                  // by value number: its top-level value
  std::vector<std::optional<OperandList>> original_;  // by op number: operands before emitTop
  std::vector<std::unique_ptr<Op>> out_;
};

}  // namespace

void outline(Graph& g, const Plan& plan) { Outliner(g, plan).run(); }

}  // namespace fusec::fusion
