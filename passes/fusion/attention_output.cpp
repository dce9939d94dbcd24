#include "passes/fusion/attention_output.h"

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "support/ptr_hash.h"

namespace fusec::fusion {

bool keepsRows(const Op& permute) {
  if (permute.kind != OpKind::Permute) return false;
  const auto& perm = permute.attrInts("perm");
  if (perm.empty() || perm.back() != int64_t(perm.size()) - 1) return false;
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != int64_t(i)) return true;
  return false;  // the identity: nothing to store differently
}

bool readAttentionOutputThroughPermute(Graph& g) {
  // The readers of each value, in program order, found once: a scan of the later ops for each
  // attention made this pass quadratic in layers (a third of a 1,000-layer compile).
  PtrMap<const Value*, std::vector<Op*>> readers;
  for (auto& op : g.ops)
    for (size_t k = 0; k < op->operands.size(); ++k) {
      const Value* v = op->operands[k];
      if (std::find(op->operands.begin(), op->operands.begin() + long(k), v) == op->operands.begin() + long(k))
        readers[v].push_back(op.get());
    }
  const PtrSet<const Value*> outputs(g.outputs.begin(), g.outputs.end());
  PtrMap<const Op*, std::unique_ptr<Op>> after;  // a permute -> the inverse placed after it
  for (auto& owned : g.ops) {
    if (owned->kind != OpKind::Attention) continue;
    Value* o = owned->result(0);
    if (outputs.count(o)) continue;
    Op* permute = nullptr;
    std::vector<Op*> others;
    bool ok = true;
    for (Op* u : readers[o]) {
      if (!permute && keepsRows(*u)) permute = u;
      else if (u->kind == OpKind::AttentionBackward && permute) others.push_back(u);
      else ok = false;  // another reader, or a backward before the permute
      if (!ok) break;
    }
    if (!ok || !permute || others.empty()) continue;
    const auto& perm = permute->attrInts("perm");
    std::vector<int64_t> inverse(perm.size());
    for (size_t k = 0; k < perm.size(); ++k) inverse[size_t(perm[k])] = int64_t(k);
    auto back = makePermute(permute->result(), inverse);
    back->loc = permute->loc;
    Value* view = back->result();
    for (Op* u : others) std::replace(u->operands.begin(), u->operands.end(), o, view);
    after[permute] = std::move(back);
  }
  if (after.empty()) return false;
  std::vector<std::unique_ptr<Op>> ops;
  ops.reserve(g.ops.size() + after.size());
  for (auto& op : g.ops) {
    auto it = after.find(op.get());
    ops.push_back(std::move(op));
    if (it != after.end()) ops.push_back(std::move(it->second));
  }
  g.ops = std::move(ops);
  return true;
}

}  // namespace fusec::fusion
