#include "passes/memory_plan.h"

#include <algorithm>
#include <climits>
#include <numeric>

#include "passes/pass.h"

namespace fusec {
namespace {

// Places the buffers in `order`, each clear of every already placed buffer live at the same
// time: at the lowest offset (first fit) or in the smallest gap it fits (best fit), above all
// of them when no gap fits.
ArenaPlan placeInOrder(const std::vector<Buffer>& bufs, const std::vector<size_t>& order, bool bestFit) {
  struct Placed {
    int64_t begin, end;
    const Buffer* buf;
  };
  std::vector<Placed> placed;  // sorted by begin
  placed.reserve(bufs.size());
  ArenaPlan plan;
  for (size_t idx : order) {
    const Buffer& b = bufs[idx];
    int64_t cursor = 0, at = -1, atGap = INT64_MAX;
    for (const Placed& p : placed) {
      if (!p.buf->overlapsInTime(b)) continue;
      if (const int64_t gap = p.begin - cursor; gap >= b.bytes && gap < atGap) {
        at = cursor;
        atGap = gap;
        if (!bestFit) break;
      }
      cursor = std::max(cursor, p.end);
    }
    if (at < 0) at = cursor;
    auto pos = std::upper_bound(placed.begin(), placed.end(), at, [](int64_t v, const Placed& p) { return v < p.begin; });
    placed.insert(pos, Placed{at, at + b.bytes, &b});
    plan.offset[b.value] = at;
    plan.bytes = std::max(plan.bytes, at + b.bytes);
  }
  return plan;
}

bool memoryPlanGraph(Graph& g) {
  StorageMap storage(g);
  ArenaPlan plan = planArena(computeLiveness(g, storage));
  bool changed = false;
  for (auto& op : g.ops)
    for (auto& r : op->results) {
      int64_t off = -1;
      if (storage.of(r.get()) == Storage::Arena) off = plan.offset.at(r.get());
      else if (op->kind == OpKind::Input || op->kind == OpKind::Param) off = storage.resident().offset.at(r.get());
      changed |= r->offset != off;
      r->offset = off;
    }
  return changed;
}

}  // namespace

ArenaPlan planArena(const Liveness& live) {
  const auto& bufs = live.buffers;
  std::vector<size_t> byDef(bufs.size());
  std::iota(byDef.begin(), byDef.end(), size_t(0));  // buffers come in definition order
  std::vector<size_t> bySize = byDef;
  std::stable_sort(bySize.begin(), bySize.end(), [&](size_t a, size_t b) { return bufs[a].bytes > bufs[b].bytes; });
  ArenaPlan best;
  best.bytes = INT64_MAX;
  for (const auto* order : {&bySize, &byDef})
    for (bool bestFit : {false, true}) {
      if (best.bytes <= live.lowerBound) return best;  // optimal already
      ArenaPlan p = placeInOrder(bufs, *order, bestFit);
      if (p.bytes < best.bytes) best = std::move(p);
    }
  return best;
}

MemoryPlanStats planMemoryStats(const Graph& g) {
  StorageMap storage(g);
  Liveness live = computeLiveness(g, storage);
  MemoryPlanStats s;
  s.plannedBytes = planArena(live).bytes;
  s.liveLowerBoundBytes = live.lowerBound;
  s.residentBytes = storage.resident().bytes;
  s.peakBytes = s.residentBytes + s.plannedBytes;
  return s;
}

std::unique_ptr<Pass> createMemoryPlanPass() { return std::make_unique<FunctionPass>("memory-plan", &memoryPlanGraph); }

}  // namespace fusec
