// The `cache-weight-casts` pass (bf16): every `cast(param W -> bf16)` becomes a persistent
// param "W.bf16", so a training step's forward and backward GEMMs read bf16 weights without
// converting them each step. When the function updates W in place (adamw's `-> "W"`), it
// also returns `cast(W.new -> bf16) -> "W.bf16"`: the optimizer refreshes the copy, and the
// runtime binds W.bf16 = bf16(W) once, before the first step.
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "ir/builder.h"
#include "ir/roles.h"
#include "passes/pass.h"
#include "support/ptr_hash.h"

namespace fusec {
namespace {

constexpr DType kLow = DType::bf16;

bool isWeightCast(const Op& op) {
  if (op.kind != OpKind::Cast || op.result()->type.dtype != kLow) return false;
  const Op* src = op.operands[0]->def;
  return src && src->kind == OpKind::Param && roleOf(*src) == Role::Weight && src->result()->type.dtype != kLow;
}

bool cacheWeightCasts(Graph& g) {
  std::unordered_set<std::string> names, params;  // value names; param names (findParam scans)
  for (auto& op : g.ops) {
    for (auto& r : op->results)
      if (!r->name.empty()) names.insert(r->name);
    if (op->kind == OpKind::Param) params.insert(op->attrStr("name"));
  }

  // One sweep decides, one rebuilds the op list and one rewrites uses: an insert per copy and
  // a replaceAllUses per cast were each O(ops), quadratic on xl.
  std::map<std::string, Value*> cached;  // weight name -> its bf16 param
  PtrMap<const Value*, Value*> copyOf;  // cast result -> the param replacing it
  PtrMap<const Op*, Op*> declaredAfter;  // weight -> its copy's param op
  Builder b(g);
  const size_t original = g.ops.size();
  for (size_t i = 0; i < original; ++i) {
    Op& op = *g.ops[i];
    if (!isWeightCast(op)) continue;
    const std::string weight = op.operands[0]->def->attrStr("name");
    Value*& copy = cached[weight];
    if (!copy) {
      const std::string name = weight + "." + std::string(dtypeName(kLow));
      if (params.count(name)) throw Error("cache-weight-casts: @" + g.name + " already has a param named \"" + name + "\"");
      copy = b.param(name, op.result()->type);
      setRole(*copy->def, Role::WeightCopy, weight);
      setLayer(*copy->def, layerOf(*op.operands[0]->def));
      // The cast's own name (if any) goes away with it; the param takes the weight's.
      if (op.result()->name == name || names.insert(name).second) copy->name = name;
      declaredAfter[op.operands[0]->def] = copy->def;  // beside the weight it copies
    }
    op.result()->name.clear();
    copyOf[op.result()] = copy;
  }
  if (copyOf.empty()) return false;

  std::vector<std::unique_ptr<Op>> copies;  // Builder appended them at the end
  for (size_t i = original; i < g.ops.size(); ++i) copies.push_back(std::move(g.ops[i]));
  g.ops.resize(original);
  PtrMap<const Op*, std::unique_ptr<Op>> copyOp;
  for (auto& c : copies) copyOp[c.get()] = std::move(c);
  std::vector<std::unique_ptr<Op>> ops;
  ops.reserve(g.ops.size() + copyOp.size());
  for (auto& op : g.ops) {
    auto after = declaredAfter.find(op.get());
    const bool dropped = op->kind == OpKind::Cast && copyOf.count(op->result());
    if (!dropped) ops.push_back(std::move(op));
    if (after != declaredAfter.end()) ops.push_back(std::move(copyOp.at(after->second)));
  }
  g.ops = std::move(ops);
  auto rewrite = [&](Value*& v) {
    auto it = copyOf.find(v);
    if (it != copyOf.end()) v = it->second;
  };
  for (auto& op : g.ops)
    for (Value*& v : op->operands) rewrite(v);
  for (Value*& v : g.outputs) rewrite(v);

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
