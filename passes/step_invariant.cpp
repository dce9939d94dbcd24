#include "passes/step_invariant.h"

#include "support/ptr_hash.h"

namespace fusec {

PtrSet<const Op*> stepInvariantOps(const Graph& g) {
  PtrSet<const Op*> invariant;
  for (const auto& op : g.ops) {
    if (op->kind == OpKind::Input || op->kind == OpKind::Param || op->results.empty()) continue;
    bool all = true;
    for (const Value* v : op->operands) all = all && v->def && invariant.count(v->def);
    if (all) invariant.insert(op.get());
  }
  return invariant;
}

}  // namespace fusec
