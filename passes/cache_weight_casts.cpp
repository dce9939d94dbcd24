// The `cache-weight-casts` pass (bf16): every `cast(param W -> bf16)` becomes a persistent
// param "W.bf16", so a training step's forward and backward GEMMs read bf16 weights without
// converting them each step. When the function updates W in place (adamw's `-> "W"`), it
// also returns `cast(W.new -> bf16) -> "W.bf16"`: the optimizer refreshes the copy, and the
// runtime binds W.bf16 = bf16(W) once, before the first step.
#include <algorithm>
#include <map>
#include <unordered_set>

#include "ir/builder.h"
#include "passes/pass.h"

namespace fusec {
namespace {

constexpr DType kLow = DType::bf16;

bool isWeightCast(const Op& op) {
  if (op.kind != OpKind::Cast || op.result()->type.dtype != kLow) return false;
  const Op* src = op.operands[0]->def;
  return src && src->kind == OpKind::Param && src->result()->type.dtype != kLow;
}

bool cacheWeightCasts(Graph& g) {
  std::unordered_set<std::string> names;
  for (auto& op : g.ops)
    for (auto& r : op->results)
      if (!r->name.empty()) names.insert(r->name);

  std::map<std::string, Value*> cached;  // weight name -> its bf16 param
  std::unordered_set<const Op*> dropped;
  Builder b(g);
  for (size_t i = 0; i < g.ops.size(); ++i) {
    Op& op = *g.ops[i];
    if (!isWeightCast(op)) continue;
    const std::string weight = op.operands[0]->def->attrStr("name");
    Value*& copy = cached[weight];
    if (!copy) {
      const std::string name = weight + "." + std::string(dtypeName(kLow));
      if (g.findParam(name)) throw Error("cache-weight-casts: @" + g.name + " already has a param named \"" + name + "\"");
      copy = b.param(name, op.result()->type);
      // The cast's own name (if any) goes away with it; the param takes the weight's.
      if (op.result()->name == name || names.insert(name).second) copy->name = name;
      // Declared beside the weight it copies (Builder appended it at the end).
      std::unique_ptr<Op> p = std::move(g.ops.back());
      g.ops.pop_back();
      size_t at = size_t(std::find_if(g.ops.begin(), g.ops.end(), [&](auto& o) { return o.get() == op.operands[0]->def; }) -
                         g.ops.begin());
      g.ops.insert(g.ops.begin() + std::ptrdiff_t(at + 1), std::move(p));
      ++i;  // the cast moved one slot down
    }
    op.result()->name.clear();
    g.replaceAllUses(op.result(), copy);
    dropped.insert(&op);
  }
  if (dropped.empty()) return false;
  g.eraseIf([&](Op* op) { return dropped.count(op) != 0; });

  // Refresh each copy whose weight the function updates in place.
  const size_t n = g.outputs.size();
  for (size_t i = 0; i < n; ++i) {
    auto it = cached.find(g.updateOf(i));
    if (it == cached.end()) continue;
    const std::string copy = it->second->def->attrStr("name");
    Value* refreshed = b.cast(g.outputs[i], kLow);
    if (names.insert(copy + ".new").second) refreshed->name = copy + ".new";
    g.addOutput(refreshed, copy);
  }
  return true;
}

}  // namespace

std::unique_ptr<Pass> createCacheWeightCastsPass() {
  return std::make_unique<FunctionPass>("cache-weight-casts", &cacheWeightCasts);
}

}  // namespace fusec
