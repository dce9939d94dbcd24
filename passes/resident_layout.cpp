#include "passes/resident_layout.h"

#include <vector>

#include "passes/liveness.h"

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
  std::unordered_map<const Value*, const Value*> next, prev;

  bool reaches(const Value* from, const Value* to) const {
    for (const Value* v = from; v;) {
      if (v == to) return true;
      auto it = next.find(v);
      v = it == next.end() ? nullptr : it->second;
    }
    return false;
  }

  // Adds the links of `ops` in order, all or nothing.
  bool tryAdd(const std::vector<Value*>& ops) {
    Chains trial = *this;
    for (size_t i = 0; i + 1 < ops.size(); ++i) {
      const Value *a = ops[i], *b = ops[i + 1];
      auto n = trial.next.find(a);
      auto p = trial.prev.find(b);
      const bool hasLink = n != trial.next.end() && n->second == b;
      if (hasLink) continue;
      if (n != trial.next.end() || p != trial.prev.end() || trial.reaches(b, a)) return false;
      trial.next[a] = b;
      trial.prev[b] = a;
    }
    *this = std::move(trial);
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
