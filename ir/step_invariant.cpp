#include "ir/step_invariant.h"

#include "ir/strided_view.h"

namespace fusec {

bool isStepInvariant(const Op& op) {
  if (op.kind == OpKind::Kernel) return op.attrBool("step_invariant");
  return op.operands.empty() && !op.results.empty() && op.kind != OpKind::Input && op.kind != OpKind::Param;
}

bool isStepInvariantValue(const Value* v) {
  const Op* d = v ? v->def : nullptr;
  while (d && isViewOp(d->kind) && d->operands.size() == 1) d = d->operands[0]->def;
  return d && isStepInvariant(*d);
}

}  // namespace fusec
