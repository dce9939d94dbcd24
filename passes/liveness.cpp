#include "passes/liveness.h"

#include <algorithm>

#include "ir/collectives.h"
#include "ir/strided_view.h"
#include "ir/step_invariant.h"
#include "support/ptr_hash.h"

namespace fusec {

StorageMap::StorageMap(const Graph& g) : resident_(layoutResident(g)), numbers_(g), cls_(numbers_.numValues(), Storage::None) {
  std::vector<char> inPlace(numbers_.numValues(), 0);
  for (size_t i = 0; i < g.outputs.size(); ++i)
    if (!g.updateOf(i).empty()) inPlace[numbers_.of(g.outputs[i])] = 1;
  std::vector<int> uses(numbers_.numValues(), 0);  // readers of each value (its ops and outputs)
  for (auto& op : g.ops)
    for (const Value* v : op->operands) ++uses[numbers_.of(v)];
  for (const Value* v : g.outputs) ++uses[numbers_.of(v)];

  for (auto& op : g.ops) {
    Storage s = Storage::Arena;
    switch (op->kind) {
      case OpKind::Input: case OpKind::Param: s = Storage::Resident; break;
      case OpKind::Constant: case OpKind::Iota: s = Storage::None; break;
      default:
        if (resident_.concats.count(op.get())) s = Storage::Resident;
        else if ((isViewOp(op->kind) && resolveView(op->result())) || op->kind == OpKind::Shard) s = Storage::Alias;
    }
    for (auto& r : op->results) {
      const size_t n = numbers_.of(r.get());
      cls_[n] = (s == Storage::Arena && inPlace[n]) ? Storage::InPlace : s;
      // An all_reduce reduces in place an operand that owns an arena buffer and that nothing
      // else reads (a gradient): the result is that buffer. Else it writes a buffer of its own;
      // so too over a step-invariant value, which is computed at the first call only and would
      // be reduced again, in place, every step.
      if (const Value* x = inPlaceOperandOf(r.get()); x && of(x) == Storage::Arena && uses[numbers_.of(x)] == 1 &&
                                                      !inPlace[n] && !isStepInvariant(*x->def))
        cls_[n] = Storage::Alias;
    }
  }
}

const Value* StorageMap::root(const Value* v) const {
  while (of(v) == Storage::Alias) {
    const Value* x = inPlaceOperandOf(v);
    v = x ? x : v->def->operands.at(0);
  }
  return v;
}

void sumLiveBytes(Liveness& l, size_t positions) {
  // Sweep of +bytes at def and -bytes after last use.
  std::vector<int64_t> delta(positions + 1, 0);
  for (const Buffer& b : l.buffers) {
    delta[size_t(b.def)] += b.bytes;
    delta[size_t(b.lastUse) + 1] -= b.bytes;
  }
  l.liveBytes.assign(positions, 0);
  l.lowerBound = 0;
  int64_t live = 0;
  for (size_t i = 0; i < positions; ++i) {
    live += delta[i];
    l.liveBytes[i] = live;
    l.lowerBound = std::max(l.lowerBound, live);
  }
}

Liveness computeLiveness(const Graph& g, const StorageMap& storage) {
  Liveness l;
  const int end = int(g.ops.size());
  // By value number: the index of the buffer the value owns, or -1.
  const GraphNumbering& numbers = storage.numbering();
  std::vector<int32_t> index(numbers.numValues(), -1);
  auto bufferOf = [&](const Value* v) -> Buffer* {
    const int32_t b = index[numbers.of(storage.root(v))];
    return b < 0 ? nullptr : &l.buffers[size_t(b)];
  };
  auto use = [&](const Value* v, int at) {
    if (Buffer* b = bufferOf(v)) b->lastUse = std::max(b->lastUse, at);
  };
  for (int i = 0; i < end; ++i) {
    const Op& op = *g.ops[size_t(i)];
    // A view op reads nothing itself; its users read its root. (A collective in place does.)
    if (op.numResults() != 1 || storage.of(op.result()) != Storage::Alias || communicates(op.kind))
      for (const Value* v : op.operands) use(v, i);
    for (auto& r : op.results)
      if (storage.of(r.get()) == Storage::Arena) {
        index[numbers.of(r.get())] = int32_t(l.buffers.size());
        l.buffers.push_back(Buffer{r.get(), bufferBytes(r->type), i, i});
      }
  }
  for (const Value* v : g.outputs) use(v, end);
  // A collective runs beside the compute (runtime/executable.h: on its own stream) from its
  // place in the order until its results' first reader waits for it: its operands stay live
  // as long as its results do, so no buffer placed meanwhile takes their bytes. A result with
  // no arena buffer of its own (an all_gather into its param: an in-place update) is waited
  // for only when the step ends, and so its operands stay live to the end.
  // Last op first: a collective that reads another's results extends them before the other
  // extends its own operands to them.
  for (auto it = g.ops.rbegin(); it != g.ops.rend(); ++it) {
    const auto& op = *it;
    if (!communicates(op->kind)) continue;
    int last = 0;
    for (auto& r : op->results)
      if (const Buffer* b = bufferOf(r.get())) last = std::max(last, b->lastUse);
      else last = end;
    for (const Value* v : op->operands) use(v, last);
  }
  // Step-invariant buffers hold their values from one call to the next: nothing else may
  // ever share their bytes.
  for (Buffer& b : l.buffers)
    if (b.value->def && isStepInvariant(*b.value->def)) b.def = 0, b.lastUse = end;

  sumLiveBytes(l, size_t(end) + 1);
  return l;
}

}  // namespace fusec
