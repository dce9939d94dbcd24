#include "passes/memory_plan.h"

#include <algorithm>
#include <climits>
#include <optional>
#include <queue>
#include <set>

#include "passes/gap_tree.h"
#include "passes/output_placement.h"
#include "passes/pass.h"

namespace fusec {
namespace {

// The free space below the arena's current top while sweeping over time: disjoint gaps,
// coalesced on free, indexed by offset (first fit and coalescing: passes/gap_tree.h) and by
// size (best fit).
class FreeList {
 public:
  explicit FreeList(bool bestFit) : bestFit_(bestFit) {}
  int64_t top() const { return top_; }

  int64_t allocate(int64_t bytes) {
    if (const std::optional<Gap> gap = bestFit_ ? bestGap(bytes) : byOffset_.firstFit(bytes)) {
      erase(*gap);
      if (gap->bytes > bytes) insert(gap->at + bytes, gap->bytes - bytes);
      return gap->at;
    }
    // Nothing fits: grow the arena, starting inside the gap that ends at the top if any.
    int64_t at = top_;
    if (const std::optional<Gap> last = byOffset_.last(); last && last->at + last->bytes == top_) {
      at = last->at;
      erase(*last);
    }
    top_ = at + bytes;
    return at;
  }

  void release(int64_t at, int64_t bytes) {
    if (const std::optional<Gap> next = byOffset_.atOrAfter(at); next && next->at == at + bytes) {
      bytes += next->bytes;
      erase(*next);
    }
    if (const std::optional<Gap> prev = byOffset_.before(at); prev && prev->at + prev->bytes == at) {
      at = prev->at;
      bytes += prev->bytes;
      erase(*prev);
    }
    insert(at, bytes);
  }

 private:
  std::optional<Gap> bestGap(int64_t bytes) const {
    auto it = bySize_.lower_bound({bytes, INT64_MIN});
    if (it == bySize_.end()) return std::nullopt;
    return Gap{it->second, it->first};
  }
  void insert(int64_t at, int64_t bytes) {
    byOffset_.insert(at, bytes);
    bySize_.emplace(bytes, at);
  }
  void erase(const Gap& g) {
    bySize_.erase({g.bytes, g.at});
    byOffset_.erase(g.at);
  }

  bool bestFit_;
  int64_t top_ = 0;
  GapTree byOffset_;
  std::set<std::pair<int64_t, int64_t>> bySize_;  // (size, offset)
};

// Sweeps the buffers in order of their first live position: a buffer's space returns to
// the free list after its last one, and each new buffer takes the first (or best) gap that
// fits. In that order the placed buffers a new one overlaps in time are exactly those still
// live, so this is the greedy "clear of every time-overlapping predecessor" in O(n log n)
// for either fit. `backward` sweeps from the end of the function instead (a buffer starts at
// its last use), which packs differently shaped tails better.
ArenaPlan sweep(const std::vector<Buffer>& bufs, bool bestFit, bool backward) {
  struct Span {
    int begin, end;
    const Buffer* buf;
  };
  std::vector<Span> spans;
  spans.reserve(bufs.size());
  for (const Buffer& b : bufs) spans.push_back(backward ? Span{-b.lastUse, -b.def, &b} : Span{b.def, b.lastUse, &b});
  std::stable_sort(spans.begin(), spans.end(), [](const Span& x, const Span& y) { return x.begin < y.begin; });

  ArenaPlan plan;
  FreeList free(bestFit);
  using Death = std::pair<int, size_t>;  // (span end, span index)
  std::priority_queue<Death, std::vector<Death>, std::greater<>> live;
  for (size_t i = 0; i < spans.size(); ++i) {
    const Span& s = spans[i];
    while (!live.empty() && live.top().first < s.begin) {
      const Buffer& dead = *spans[live.top().second].buf;
      free.release(plan.offset.at(dead.value), dead.bytes);
      live.pop();
    }
    plan.offset[s.buf->value] = s.buf->bytes == 0 ? 0 : free.allocate(s.buf->bytes);
    if (s.buf->bytes > 0) live.push({s.end, i});
  }
  plan.bytes = free.top();
  return plan;
}

// `live` less the buffers `drop` names, its lower bound recomputed for what is left.
Liveness without(const Liveness& live, const PtrSet<const Value*>& drop) {
  Liveness rest;
  for (const Buffer& b : live.buffers)
    if (!drop.count(b.value)) rest.buffers.push_back(b);
  sumLiveBytes(rest, live.liveBytes.size());
  return rest;
}

// outputsLast: the storage of every output a caller can have written in place
// (passes/output_placement.h) is planned above the rest of the arena, one after another in
// the order they are defined (they all live to the end, so none can share another's bytes):
// the runtime then allocates that top part only if an output is not placed
// (runtime/executable.h, ExecutableOptions::callerBuffers).
bool memoryPlanGraph(Graph& g, bool outputsLast) {
  StorageMap storage(g);
  Liveness live = computeLiveness(g, storage);
  std::vector<const Buffer*> top;
  ArenaPlan plan;
  if (outputsLast) {
    PtrSet<const Value*> placed;
    for (const Value* v : outputPlacements(g, storage))
      if (v) placed.insert(v);
    for (const Buffer& b : live.buffers)
      if (placed.count(b.value)) top.push_back(&b);
    plan = planArena(without(live, placed));
    for (const Buffer* b : top) {
      plan.offset[b->value] = plan.bytes;
      plan.bytes += b->bytes;
    }
  } else {
    plan = planArena(live);
  }
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

namespace {

// Offline placement, largest buffer first, each at the lowest offset (or in the smallest
// gap) clear of every already placed buffer live at the same time. It packs a few large
// buffers (a forward pass: logits, scores) better than a sweep over time, but costs
// O(n^2), so it only runs on graphs with few buffers (fused programs, not unfused ones).
constexpr size_t kOfflineLimit = 6000;

ArenaPlan placeBySize(const std::vector<Buffer>& bufs, bool bestFit) {
  std::vector<size_t> order(bufs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bufs[a].bytes > bufs[b].bytes; });
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

}  // namespace

ArenaPlan planArena(const Liveness& live) {
  ArenaPlan best;
  best.bytes = INT64_MAX;
  if (live.buffers.size() <= kOfflineLimit)
    for (bool bestFit : {false, true})
      if (ArenaPlan p = placeBySize(live.buffers, bestFit); p.bytes < best.bytes) best = std::move(p);
  for (bool backward : {false, true})
    for (bool bestFit : {true, false}) {
      if (best.bytes <= live.lowerBound) return best;  // optimal already
      if (ArenaPlan p = sweep(live.buffers, bestFit, backward); p.bytes < best.bytes) best = std::move(p);
    }
  return best;
}

MemoryPlanStats planMemoryStats(const Graph& g) {
  StorageMap storage(g);
  Liveness live = computeLiveness(g, storage);
  MemoryPlanStats s;
  // A planned graph reports the plan it carries (the `@N` offsets the runtime will use);
  // only an unplanned one is planned here.
  bool planned = !live.buffers.empty();
  int64_t top = 0;
  for (const Buffer& b : live.buffers) {
    planned = planned && b.value->offset >= 0;
    top = std::max(top, b.value->offset + b.bytes);
  }
  s.plannedBytes = planned ? top : planArena(live).bytes;
  s.liveLowerBoundBytes = live.lowerBound;
  s.residentBytes = storage.resident().bytes;
  s.peakBytes = s.residentBytes + s.plannedBytes;
  return s;
}

// Both place top-level values only (a kernel body's values keep offset -1).
std::unique_ptr<Pass> createMemoryPlanPass() {
  return std::make_unique<FunctionPass>(
      "memory-plan", [](Graph& g) { return memoryPlanGraph(g, false); }, FunctionPass::Bodies::Leaves);
}
std::unique_ptr<Pass> createMemoryPlanOutputsLastPass() {
  return std::make_unique<FunctionPass>(
      "memory-plan-outputs-last", [](Graph& g) { return memoryPlanGraph(g, true); }, FunctionPass::Bodies::Leaves);
}

}  // namespace fusec
