#include "passes/launch_stats.h"

#include <algorithm>
#include <cctype>
#include <unordered_map>

#include "passes/liveness.h"

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

// The layer of a param name, -1 when it is not a layer param; `other` when it is neither a
// layer param nor the embedding.
Reach paramReach(const std::string& name, const LaunchStatsOptions& o) {
  Reach r;
  if (name.rfind(o.layerPrefix, 0) == 0) {
    size_t i = o.layerPrefix.size(), j = i;
    while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
    if (j > i && j < name.size() && name[j] == '.') {
      r.layer = std::stoi(name.substr(i, j - i));
      return r;
    }
  }
  r.other = name.rfind(o.embeddingPrefix, 0) != 0;
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

LaunchStats launchStats(const Graph& g, const LaunchStatsOptions& opts) {
  const StorageMap storage(g);
  auto isLaunch = [&](const Op& op) {
    for (auto& r : op.results)
      if (storage.of(r.get()) == Storage::Arena || storage.of(r.get()) == Storage::InPlace) return true;
    return false;
  };

  // Forward sweep: the params each op depends on.
  std::unordered_map<const Op*, Reach> dependsOn;
  for (auto& op : g.ops) {
    Reach r;
    if (op->kind == OpKind::Param) r = paramReach(op->attrStr("name"), opts);
    for (const Value* v : op->operands) r.merge(dependsOn[v->def]);
    dependsOn[op.get()] = r;
  }
  // Backward sweep: the forward set (ancestors of ordinary outputs) and the updates fed.
  bool hasUpdates = false;
  std::unordered_map<const Op*, Reach> feeds;
  std::unordered_map<const Op*, bool> forward;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const std::string& target = g.updateOf(i);
    hasUpdates = hasUpdates || !target.empty();
    if (target.empty()) forward[g.outputs[i]->def] = true;
    else feeds[g.outputs[i]->def].merge(paramReach(target, opts));
  }
  for (auto it = g.ops.rbegin(); it != g.ops.rend(); ++it)
    for (const Value* v : (*it)->operands) {
      feeds[v->def].merge(feeds[it->get()]);
      if (forward[it->get()]) forward[v->def] = true;
    }

  LaunchStats s;
  for (auto& op : g.ops) {
    if (!isLaunch(*op)) continue;
    (op->kind == OpKind::Matmul ? s.gemms : s.kernels) += 1;
    const bool isForward = !hasUpdates || forward[op.get()];
    const Reach& r = isForward ? dependsOn[op.get()] : feeds[op.get()];
    const bool outside = r.other || r.layer < 0;
    if (outside) (isForward ? s.outside.forward : s.outside.backward) += 1;
    else count(isForward ? s.forwardPerLayer : s.backwardPerLayer, r.layer);
  }
  s.launchesPerLayer = {maxOf(s.forwardPerLayer), maxOf(s.backwardPerLayer)};
  return s;
}

LaunchStats launchStats(const Module& m, const LaunchStatsOptions& opts) {
  LaunchStats total;
  for (auto& g : m.funcs) {
    LaunchStats s = launchStats(*g, opts);
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
