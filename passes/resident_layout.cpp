#include "passes/resident_layout.h"

#include <vector>

#include "passes/liveness.h"
#include "support/ptr_hash.h"

namespace fusec {

bool isResidentConcatCandidate(const Op& op) {
  if (op.kind != OpKind::Concat || op.attrInt("axis") != 0) return false;
  for (const Value* v : op.operands)
    if (!v->def || v->def->kind != OpKind::Param) return false;
  return true;
}

namespace {

// Successor/predecessor links between params that must be adjacent.
struct Chains {
  PtrMap<const Value*, const Value*> next, prev;

  bool reaches(const Value* from, const Value* to) const {
    for (const Value* v = from; v;) {
      if (v == to) return true;
      auto it = next.find(v);
      v = it == next.end() ? nullptr : it->second;
    }
    return false;
  }

  // Adds the links of `ops` in order, all or nothing: a refused list takes back the links it
  // added (undone, not a copy of the maps per list, which made a deep model's layout quadratic).
  bool tryAdd(const std::vector<Value*>& ops) {
    std::vector<const Value*> added;  // each a's link a -> next[a]
    auto undo = [&] {
      for (const Value* a : added) {
        prev.erase(next.at(a));
        next.erase(a);
      }
      return false;
    };
    for (size_t i = 0; i + 1 < ops.size(); ++i) {
      const Value *a = ops[i], *b = ops[i + 1];
      auto n = next.find(a);
      auto p = prev.find(b);
      const bool hasLink = n != next.end() && n->second == b;
      if (hasLink) continue;
      if (n != next.end() || p != prev.end() || reaches(b, a)) return undo();
      next[a] = b;
      prev[b] = a;
      added.push_back(a);
    }
    return true;
  }
};

}  // namespace

ResidentLayout layoutResident(const Graph& g) {
  ResidentLayout r;
  Chains chains;
  for (auto& op : g.ops)
    if (isResidentConcatCandidate(*op) && chains.tryAdd(op->operands)) r.concats.insert(op.get());

  int64_t end = 0;
  for (auto& op : g.ops) {
    if (op->kind != OpKind::Input && op->kind != OpKind::Param) continue;
    const Value* head = op->result();
    if (chains.prev.count(head)) continue;  // placed with its chain's head
    end = alignArena(end);
    for (const Value* v = head; v;) {
      r.offset[v] = end;
      end += v->type.numel() * dtypeBytes(v->type.dtype);
      auto it = chains.next.find(v);
      v = it == chains.next.end() ? nullptr : it->second;
    }
  }
  r.bytes = alignArena(end);
  return r;
}

}  // namespace fusec
