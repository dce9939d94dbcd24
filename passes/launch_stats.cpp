#include "passes/launch_stats.h"

#include <algorithm>
#include <string_view>
#include <unordered_set>

#include "ir/roles.h"
#include "passes/liveness.h"
#include "support/ptr_hash.h"

namespace fusec {
namespace {

// What a value depends on (forward) or feeds (backward), as far as layers are concerned.
struct Reach {
  int layer = -1;      // highest layer reached
  bool other = false;  // reaches a non-layer, non-embedding param
  void merge(const Reach& r) {
    layer = std::max(layer, r.layer);
    other = other || r.other;
  }
};

// The weights read as the table of a gather (the token embedding), directly or as a
// kernel's operand that its body gathers from, with their optimizer state and copies (a
// gather of the copy makes its weight a table too).
std::unordered_set<std::string> embeddingTables(const Graph& g) {
  std::unordered_set<std::string> tables;
  auto table = [&](const Value* v) {
    if (v->def && v->def->kind == OpKind::Param)
      tables.insert(ownerName(*v->def));
  };
  for (auto& op : g.ops) {
    if (op->kind == OpKind::Gather) table(op->operands[0]);
    if (op->kind != OpKind::Kernel || !op->body) continue;
    const std::vector<Op*> inputs = op->body->inputs();  // bound to the operands in order
    for (auto& inner : op->body->ops) {
      if (inner->kind != OpKind::Gather) continue;
      auto at = std::find(inputs.begin(), inputs.end(), inner->operands[0]->def);
      if (at != inputs.end()) table(op->operands[size_t(at - inputs.begin())]);
    }
  }
  return tables;
}

// A param's layer (its role attribute), -1 outside the blocks; `other` when it is outside
// the blocks and not (the state or copy of) an embedding table.
Reach paramReach(const Op& p, const std::unordered_set<std::string>& tables) {
  Reach r;
  r.layer = int(layerOf(p));
  if (r.layer < 0) r.other = !tables.count(ownerName(p));
  return r;
}

void count(std::vector<int64_t>& perLayer, int layer) {
  if (perLayer.size() <= size_t(layer)) perLayer.resize(size_t(layer) + 1, 0);
  ++perLayer[size_t(layer)];
}

void addInto(std::vector<int64_t>& to, const std::vector<int64_t>& from) {
  if (to.size() < from.size()) to.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i) to[i] += from[i];
}

int64_t maxOf(const std::vector<int64_t>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

}  // namespace

std::vector<LaunchPlace> launchPlaces(const Graph& g) { return launchPlaces(g, StorageMap(g)); }

std::vector<LaunchPlace> launchPlaces(const Graph& g, const StorageMap& storage) {
  const std::unordered_set<std::string> tables = embeddingTables(g);
  const StringTable<const Op*> params = g.paramsByName();
  auto isLaunch = [&](const Op& op) {
    for (auto& r : op.results)
      if (storage.of(r.get()) == Storage::Arena || storage.of(r.get()) == Storage::InPlace) return true;
    return false;
  };

  // Forward sweep: the params each op depends on.
  PtrMap<const Op*, Reach> dependsOn;
  for (auto& op : g.ops) {
    Reach r;
    if (op->kind == OpKind::Param) r = paramReach(*op, tables);
    for (const Value* v : op->operands) r.merge(dependsOn[v->def]);
    dependsOn[op.get()] = r;
  }
  // Backward sweep: the forward set (ancestors of ordinary outputs) and the updates fed.
  bool hasUpdates = false;
  PtrMap<const Op*, Reach> feeds;
  PtrMap<const Op*, bool> forward;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const std::string& target = g.updateOf(i);
    hasUpdates = hasUpdates || !target.empty();
    if (target.empty()) forward[g.outputs[i]->def] = true;
    else feeds[g.outputs[i]->def].merge(paramReach(*params.at(target), tables));
  }
  for (auto it = g.ops.rbegin(); it != g.ops.rend(); ++it)
    for (const Value* v : (*it)->operands) {
      feeds[v->def].merge(feeds[it->get()]);
      if (forward[it->get()]) forward[v->def] = true;
    }

  std::vector<LaunchPlace> places(g.ops.size());
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op* op = g.ops[i].get();
    LaunchPlace& p = places[i];
    p.launch = isLaunch(*op);
    p.backward = hasUpdates && !forward[op];
    const Reach& r = p.backward ? feeds[op] : dependsOn[op];
    p.layer = r.other || r.layer < 0 ? -1 : r.layer;
  }
  return places;
}

LaunchStats launchStats(const Graph& g) {
  const std::vector<LaunchPlace> places = launchPlaces(g);
  LaunchStats s;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const LaunchPlace& p = places[i];
    if (!p.launch) continue;
    (g.ops[i]->kind == OpKind::Matmul ? s.gemms : s.kernels) += 1;
    if (p.layer < 0) (p.backward ? s.outside.backward : s.outside.forward) += 1;
    else count(p.backward ? s.backwardPerLayer : s.forwardPerLayer, p.layer);
  }
  s.launchesPerLayer = {maxOf(s.forwardPerLayer), maxOf(s.backwardPerLayer)};
  return s;
}

LaunchStats launchStats(const Module& m) {
  LaunchStats total;
  for (auto& g : m.funcs) {
    LaunchStats s = launchStats(*g);
    total.gemms += s.gemms;
    total.kernels += s.kernels;
    total.outside.forward += s.outside.forward;
    total.outside.backward += s.outside.backward;
    addInto(total.forwardPerLayer, s.forwardPerLayer);
    addInto(total.backwardPerLayer, s.backwardPerLayer);
  }
  total.launchesPerLayer = {maxOf(total.forwardPerLayer), maxOf(total.backwardPerLayer)};
  return total;
}

}  // namespace fusec
