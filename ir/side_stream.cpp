#include "ir/side_stream.h"

#include "ir/step_invariant.h"
#include "ir/strided_view.h"

namespace fusec {

PtrSet<const Value*> valuesRead(const Graph& g) {
  PtrSet<const Value*> read;
  for (const auto& op : g.ops)
    for (const Value* v : op->operands) {
      while (v->def && isViewOp(v->def->kind)) v = v->def->operands.at(0);
      read.insert(v);
    }
  return read;
}

bool offCriticalPath(const Op& op, const PtrSet<const Value*>& read) {
  if (op.kind != OpKind::Kernel || isStepInvariant(op) || op.results.empty()) return false;
  for (const auto& r : op.results)
    if (read.count(r.get())) return false;
  return true;
}

}  // namespace fusec
