#include "passes/fusion/attention_output.h"

#include <algorithm>

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
  bool changed = false;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    if (g.ops[i]->kind != OpKind::Attention) continue;
    Value* o = g.ops[i]->result(0);
    if (std::count(g.outputs.begin(), g.outputs.end(), o)) continue;
    size_t at = 0;  // the permute's position
    Op* permute = nullptr;
    std::vector<Op*> others;
    bool ok = true;
    for (size_t j = i + 1; j < g.ops.size() && ok; ++j) {
      Op* u = g.ops[j].get();
      if (!std::count(u->operands.begin(), u->operands.end(), o)) continue;
      if (!permute && keepsRows(*u)) permute = u, at = j;
      else if (u->kind == OpKind::AttentionBackward && permute) others.push_back(u);
      else ok = false;  // another reader, or a backward before the permute
    }
    if (!ok || !permute || others.empty()) continue;
    const auto& perm = permute->attrInts("perm");
    std::vector<int64_t> inverse(perm.size());
    for (size_t k = 0; k < perm.size(); ++k) inverse[size_t(perm[k])] = int64_t(k);
    auto back = makePermute(permute->result(), inverse);
    back->loc = permute->loc;
    Value* view = back->result();
    g.ops.insert(g.ops.begin() + long(at) + 1, std::move(back));
    for (Op* u : others) std::replace(u->operands.begin(), u->operands.end(), o, view);
    changed = true;
  }
  return changed;
}

}  // namespace fusec::fusion
