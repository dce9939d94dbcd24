#include "passes/step_invariant.h"

#include "ir/step_invariant.h"
#include "passes/pass.h"

namespace fusec {

bool markStepInvariant(Graph& g) {
  bool planned = false;
  for (const auto& op : g.ops)
    for (const auto& r : op->results) planned = planned || r->offset >= 0;
  bool changed = false;
  for (auto& op : g.ops) {
    if (op->kind != OpKind::Kernel) continue;
    bool invariant = true;
    for (const Value* v : op->operands) invariant = invariant && isStepInvariantValue(v);
    if (op->attrBool("step_invariant") == invariant) continue;
    // The plan kept (or shared) this kernel's buffers by the old record: a new one would make
    // the runtime skip a kernel whose bytes the plan lets others reuse.
    if (planned)
      throw Error("step-invariant: kernel '" + op->attrStr("name") +
                  "' would change its record after memory-plan; run step-invariant before memory-plan");
    op->setAttr("step_invariant", invariant);
    changed = true;
  }
  return changed;
}

std::unique_ptr<Pass> createStepInvariantPass() {
  // It sets the kernel ops' own attribute only.
  return std::make_unique<FunctionPass>("step-invariant", &markStepInvariant, FunctionPass::Bodies::Leaves);
}

}  // namespace fusec
