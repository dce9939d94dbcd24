// The `cache-weight-casts` pass (bf16): every `cast(param W -> bf16)` becomes a persistent
// param "W.bf16", so a training step's forward and backward GEMMs read bf16 weights without
// converting them each step. When the function updates W in place (adamw's `-> "W"`), it
// also returns `cast(W.new -> bf16) -> "W.bf16"`: the optimizer refreshes the copy, and the
// runtime binds W.bf16 = bf16(W) once, before the first step.
// A cast of a weight seen through layout views (`cast(permute(W))`, as an imported
// nn.Linear's `x @ W.t()` reaches autocast) is the same cast: the views are applied to
// W.bf16 in its place (a cast commutes with permute and reshape), so imported models keep
// no per-step weight casts either.
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

bool isLayoutView(const Op* op) { return op && (op->kind == OpKind::Permute || op->kind == OpKind::Reshape); }

// The weight param a bf16 cast converts, seen through `views` (layout views, the cast's
// operand's first), or null when the cast's source is not a wider weight.
const Op* castWeight(const Op& op, std::vector<const Op*>& views) {
  views.clear();
  if (op.kind != OpKind::Cast || op.result()->type.dtype != kLow) return nullptr;
  const Op* src = op.operands[0]->def;
  for (; isLayoutView(src); src = src->operands[0]->def) views.push_back(src);
  const bool weight = src && src->kind == OpKind::Param && roleOf(*src) == Role::Weight && src->result()->type.dtype != kLow;
  return weight ? src : nullptr;
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
  PtrMap<const Op*, std::vector<Op*>> viewsFor;  // a cast through views -> the views of the copy
  Builder b(g);
  const size_t original = g.ops.size();
  std::vector<const Op*> views;
  for (size_t i = 0; i < original; ++i) {
    Op& op = *g.ops[i];
    const Op* weightOp = castWeight(op, views);
    if (!weightOp) continue;
    const std::string weight = weightOp->attrStr("name");
    Value*& copy = cached[weight];
    if (!copy) {
      const std::string name = weight + "." + std::string(dtypeName(kLow));
      if (params.count(name)) throw Error("cache-weight-casts: @" + g.name + " already has a param named \"" + name + "\"");
      copy = b.param(name, Type{kLow, weightOp->result()->type.shape});
      setRole(*copy->def, Role::WeightCopy, weight);
      setLayer(*copy->def, layerOf(*weightOp));
      // The cast's own name (if any) goes away with it; the param takes the weight's.
      if ((views.empty() && op.result()->name == name) || names.insert(name).second) copy->name = name;
      declaredAfter[weightOp] = copy->def;  // beside the weight it copies
    }
    Value* replacement = copy;
    for (auto view = views.rbegin(); view != views.rend(); ++view) {
      replacement = (*view)->kind == OpKind::Permute ? b.permute(replacement, (*view)->attrInts("perm"))
                                                     : b.reshape(replacement, (*view)->result()->type.shape);
      viewsFor[&op].push_back(replacement->def);
    }
    op.result()->name.clear();
    copyOf[op.result()] = replacement;
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
    if (auto v = viewsFor.find(op.get()); v != viewsFor.end())  // the copy's views take the cast's place
      for (Op* view : v->second) ops.push_back(std::move(copyOp.at(view)));
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
