#include "passes/memory_timeline.h"

#include <algorithm>
#include <map>
#include <unordered_set>

#include "ir/printer.h"
#include "ir/roles.h"
#include "passes/launch_stats.h"
#include "passes/liveness.h"
#include "support/ptr_hash.h"

namespace fusec {

const char* memoryKindName(MemoryKind k) {
  switch (k) {
    case MemoryKind::Saved: return "saved";
    case MemoryKind::Temporary: return "temporary";
    case MemoryKind::Gradient: return "gradient";
    case MemoryKind::Optimizer: return "optimizer";
  }
  return "?";
}

namespace {

// The ops computed from the optimizer's own state: they read AdamW's moments or its step
// counter, directly or through another such op (the bias-correction scalars), or write a
// param in place (the update kernels).
PtrSet<const Op*> optimizerOps(const Graph& g, const StorageMap& storage) {
  PtrSet<const Op*> opt;
  for (auto& op : g.ops) {
    bool is = false;
    if (op->kind == OpKind::Input || op->kind == OpKind::Param) {
      const Role r = roleOf(*op);
      is = r == Role::StepCount || r == Role::ExpAvg || r == Role::ExpAvgSq;
    }
    for (auto& r : op->results) is = is || storage.of(r.get()) == Storage::InPlace;
    for (const Value* v : op->operands) is = is || (v->def && opt.count(v->def));
    if (is) opt.insert(op.get());
  }
  return opt;
}

std::string producerOf(const Op& op) {
  if (op.kind == OpKind::Kernel) return op.attrStr("name");  // every kernel has one
  return std::string(op.info().name);
}

// The resident region by kind: params by role, and the inputs.
std::vector<ResidentBand> residentBands(const Graph& g) {
  std::map<int, ResidentBand> bands;  // ordered as listed
  auto add = [&](int order, const char* label, const Op& op) {
    ResidentBand& b = bands[order];
    b.label = label;
    b.bytes += alignArena(op.result()->type.numel() * dtypeBytes(op.result()->type.dtype));
  };
  for (auto& op : g.ops) {
    if (op->kind == OpKind::Input) add(4, "inputs", *op);
    if (op->kind != OpKind::Param) continue;
    switch (roleOf(*op)) {
      case Role::ExpAvg:
      case Role::ExpAvgSq: add(1, "AdamW moments", *op); break;
      case Role::WeightCopy: add(2, "bf16 copies", *op); break;
      case Role::Buffer: add(3, "buffers", *op); break;
      default: add(0, "weights", *op); break;
    }
  }
  std::vector<ResidentBand> out;
  for (auto& [order, b] : bands) out.push_back(b);
  return out;
}

}  // namespace

MemoryTimeline memoryTimeline(const Graph& g) {
  const StorageMap storage(g);
  const Liveness live = computeLiveness(g, storage);
  const std::vector<LaunchPlace> places = launchPlaces(g, storage);
  const PtrSet<const Op*> optimizer = optimizerOps(g, storage);
  const auto names = valueNames(g);

  // The buffers a backward op reads (through views): the activations saved for it.
  PtrSet<const Value*> readByBackward;
  for (size_t i = 0; i < g.ops.size(); ++i)
    if (places[i].backward)
      for (const Value* v : g.ops[i]->operands) readByBackward.insert(storage.root(v));

  MemoryTimeline t;
  t.positions = int(g.ops.size());
  t.launchesBefore.assign(g.ops.size() + 1, 0);
  for (size_t i = 0; i < g.ops.size(); ++i) t.launchesBefore[i + 1] = t.launchesBefore[i] + (places[i].launch ? 1 : 0);
  for (const Buffer& b : live.buffers) {
    const Value* v = b.value;
    if (v->offset < 0)
      throw Error("memory timeline: value " + names.at(v) + " has no arena offset; run memory-plan first (the default "
                  "pipeline does)");
    MemoryBox box;
    box.name = names.at(v);
    box.producer = producerOf(*v->def);
    box.offset = v->offset;
    box.bytes = b.bytes;
    box.def = b.def;
    box.lastUse = b.lastUse;
    const LaunchPlace& at = places[size_t(b.def)];
    if (optimizer.count(v->def)) box.kind = MemoryKind::Optimizer;
    else if (at.backward) box.kind = MemoryKind::Gradient;
    else if (readByBackward.count(v)) box.kind = MemoryKind::Saved;
    else box.kind = MemoryKind::Temporary;
    t.arenaBytes = std::max(t.arenaBytes, box.offset + box.bytes);
    t.boxes.push_back(std::move(box));
  }
  t.resident = residentBands(g);
  for (const ResidentBand& b : t.resident) t.residentBytes += b.bytes;
  for (size_t i = 0; i < live.liveBytes.size(); ++i)
    if (live.liveBytes[i] > t.peakLiveBytes) t.peakLiveBytes = live.liveBytes[i], t.peakAt = int(i);

  // One mark for each phase (a layer's forward or backward, the ops outside the layers, the
  // optimizer), where its longest run of launches begins. A phase's launches are not all in one
  // run: the schedule hoists an update's first ops to the start and runs each layer's AdamW
  // between the backward's layers, and marking every run drew "L1 bwd" before layer 0's
  // forward and each backward twice.
  struct Run {
    int start = -1, length = 0;
  };
  std::map<std::string, Run> longest;
  std::string last;
  int runStart = -1, runLength = 0;
  auto close = [&] {
    if (last.empty()) return;
    Run& r = longest[last];
    if (runLength > r.length) r = {runStart, runLength};
  };
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const LaunchPlace& p = places[i];
    if (!p.launch) continue;
    std::string label = optimizer.count(g.ops[i].get()) ? "optimizer"
                        : (p.layer < 0 ? std::string("outside") : "L" + std::to_string(p.layer)) + (p.backward ? " bwd" : "");
    if (label != last) {
      close();
      last = label;
      runStart = int(i);
      runLength = 0;
    }
    ++runLength;
  }
  close();
  for (const auto& [label, run] : longest) t.marks.push_back({run.start, label});
  std::sort(t.marks.begin(), t.marks.end(), [](const PhaseMark& a, const PhaseMark& b) { return a.at < b.at; });
  return t;
}

}  // namespace fusec
