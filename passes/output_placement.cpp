#include "passes/output_placement.h"

#include <set>

#include "ir/step_invariant.h"
#include "ir/strided_view.h"
#include "passes/liveness.h"
#include "support/ptr_hash.h"

namespace fusec {

std::vector<const Value*> outputPlacements(const Graph& g) { return outputPlacements(g, StorageMap(g)); }

std::vector<const Value*> outputPlacements(const Graph& g, const StorageMap& storage) {
  std::vector<const Value*> placed(g.outputs.size(), nullptr);
  std::set<const Value*> taken;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const Value* v = g.outputs[i];
    auto view = resolveView(v);
    const Value* base = view ? view->base : nullptr;
    if (!base) continue;
    // A reshape chain over a dense value reads it whole, in order; anything else (a slice,
    // a transpose, a broadcast) is a copy.
    const bool wholeInOrder = view->offset == 0 && isContiguousView(*view, v->type.shape) &&
                              base->type.numel() == v->type.numel() && base->type.dtype == v->type.dtype;
    // (A param's in-place update has no offset of its own: its storage is the param's.)
    const Op* d = base->def;
    const bool movable = d && storage.of(base) == Storage::Arena && d->kind != OpKind::Input && d->kind != OpKind::Param &&
                         d->kind != OpKind::Concat && d->kind != OpKind::Shard && !isStepInvariant(*d) &&
                         g.updateOf(i).empty();
    if (!taken.insert(base).second) continue;  // an earlier output owns it (or copies from it)
    if (wholeInOrder && movable) placed[i] = base;
  }
  return placed;
}

}  // namespace fusec
