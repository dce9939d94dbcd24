// schedule: reorders the top-level ops of each function into another valid order with lower
// peak live arena bytes (passes/liveness.h). Kernel bodies are not touched.
//
// Only "real" ops (those computing an Arena or InPlace value) are scheduled; the rest cost no
// time or memory where they stand, so the final order places inputs and params first, and
// every constant, iota, view and resident concat just before its first user.
//
// Dependencies are data edges between real ops (through chains of views) plus, for every
// in-place update `return %w.new -> "w"`, an edge from each other reader of param w to the
// op that writes w.new: the write lands in w's own storage, so every read of the old w must
// come first.
//
//   1. List scheduling. Ops on the optimizer side (every path from them ends in an update
//      output, and none in an ordinary output such as the loss: the whole backward, the
//      weight-gradient GEMMs, norm-weight colsums, AdamW) run as soon as their operands are
//      ready, oldest-ready first; the rest (the forward) keep trace order. So layer l's
//      weight gradients are computed and consumed by its AdamW kernel right after layer l's
//      backward (the update waits for the layer's last read of the weight), and its saved
//      activations and gradients die there instead of at the end of the step.
//   2. Sinking, last op first: an op moves to just before its first successor when the bytes
//      of its results (whose live ranges shrink) exceed the bytes of the operand buffers
//      whose ranges it would extend. This also undoes the harm of step 1 where an update
//      op was ready long before it was needed (`exp_avg * beta1` at the very start).
//
//   3. Collectives (ir/collectives.h) run beside the compute, on their own stream: each is
//      placed as soon as its operands are ready, and the readers of its results (a bucket's
//      AdamW updates) wait until the second collective after it has been issued. So the
//      reduction of one bucket overlaps the backward that produces the next ones, and the
//      compute stream waits for a bucket only once that backward is done (or at the end).
//      Readers of an all_gather's results (ZeRO-1's bf16 weight copies) go to the end.
//      This holds a bucket's gradients longer and may raise the peak (small's data-parallel
//      step: 598 -> 726 MB of arena): the overlap is worth it.
//   4. Kernels that nothing after them reads (AdamW's updates) are recorded side_stream
//      (ir/side_stream.h): the runtime runs them beside the compute, from where they stand.
//
// The pass keeps the best of {original order, sinking alone, step 1 (eager or hoisting) and
// sinking} by peak live
// bytes, then by the sum of live bytes over all positions: with the peak at the
// forward/backward turn, as in most training steps, every order has the same peak, and the
// sum is what tells an order that frees gradients layer by layer from one that keeps them
// all to the end.
#include <algorithm>
#include <functional>
#include <optional>
#include <set>
#include <tuple>

#include "ir/collectives.h"
#include "ir/side_stream.h"
#include "passes/liveness.h"
#include "passes/pass.h"

namespace fusec {
namespace {

bool isSignature(const Op& op) { return op.kind == OpKind::Input || op.kind == OpKind::Param; }

// The dependence graph over the real ops of one function. Tables by op or value number are
// by the StorageMap's numbering (ir/numbering.h), which reordering keeps.
struct DepGraph {
  const GraphNumbering* numbers = nullptr;
  std::vector<Op*> real;                     // in original order
  std::vector<int> realIndex;                // by op number: its index in `real`, or -1
  std::vector<std::vector<int>> succ;        // data and anti successors (may repeat)
  std::vector<std::vector<int>> dataSucc;    // data successors only (may repeat)
  std::vector<std::vector<int>> readers;     // by value number: real ops reading the Arena buffer
  std::vector<char> outputBuffer;            // by value number: an Arena buffer live to the end
  std::vector<std::vector<const Value*>> operandBuffers;  // per real op: distinct Arena roots read
  std::vector<int64_t> resultBytes;          // per real op: Arena bytes whose range moves with it
  std::vector<int64_t> allocBytes;           // per real op: Arena bytes it writes
  std::vector<bool> liveToEnd;               // per real op: some result is (an alias of) an output
  std::vector<bool> updates;                 // per real op: some result is an update output

  // The index in `real` of op, or -1 for an op that is not real.
  int indexOf(const Op* op) const { return realIndex[numbers->of(op)]; }
  // The index of an op that must be real (an Arena buffer's owner).
  int realOf(const Op* op) const {
    const int i = indexOf(op);
    if (i < 0) throw Error("internal: schedule: an arena buffer's owner is not a real op");
    return i;
  }
  size_t number(const Value* v) const { return numbers->of(v); }
  const std::vector<int>& readersOf(const Value* buffer) const { return readers[number(buffer)]; }
  bool isOutputBuffer(const Value* buffer) const { return outputBuffer[number(buffer)] != 0; }
};

DepGraph buildDeps(const Graph& g, const StorageMap& storage) {
  DepGraph d;
  d.numbers = &storage.numbering();
  d.realIndex.assign(d.numbers->numOps(), -1);
  d.readers.resize(d.numbers->numValues());
  d.outputBuffer.assign(d.numbers->numValues(), 0);
  for (auto& op : g.ops) {
    if (isSignature(*op)) continue;
    bool isReal = communicates(op->kind);  // it launches work even when it owns no buffer
    for (auto& r : op->results) {
      Storage s = storage.of(r.get());
      isReal = isReal || s == Storage::Arena || s == Storage::InPlace;
    }
    if (!isReal) continue;
    d.realIndex[d.numbers->of(op.get())] = int(d.real.size());
    d.real.push_back(op.get());
  }
  const size_t n = d.real.size();
  d.succ.resize(n);
  d.dataSucc.resize(n);
  d.updates.assign(n, false);
  d.operandBuffers.resize(n);
  d.resultBytes.assign(n, 0);
  d.liveToEnd.assign(n, false);
  d.allocBytes.assign(n, 0);

  // The real op that makes `v`: its def, or through views the def of what they view. A
  // collective that reduces in place is real itself, so its readers depend on it and not on
  // the producer of the buffer it reuses.
  auto producer = [&](const Value* v) -> int {
    for (;;) {
      if (const int i = d.indexOf(v->def); i >= 0) return i;
      if (storage.of(v) != Storage::Alias) return -1;
      v = v->def->operands.at(0);
    }
  };
  // Params each real op reads (directly, through views, or through a resident concat).
  std::vector<std::vector<int>> paramReaders(d.numbers->numValues());  // by value number
  std::vector<bool> hasUser(n, false);
  for (size_t i = 0; i < n; ++i) {
    for (const Value* v : d.real[i]->operands) {
      const Value* root = storage.root(v);
      if (int p = producer(v); p >= 0) {
        d.succ[size_t(p)].push_back(int(i));
        d.dataSucc[size_t(p)].push_back(int(i));
        hasUser[size_t(p)] = true;
        if (storage.of(root) == Storage::Arena) {
          d.readers[d.number(root)].push_back(int(i));
          auto& ob = d.operandBuffers[i];
          if (std::find(ob.begin(), ob.end(), root) == ob.end()) ob.push_back(root);
        }
      }
      if (root->def->kind == OpKind::Param) paramReaders[d.number(root)].push_back(int(i));
      if (storage.resident().concats.count(root->def))
        for (const Value* p : root->def->operands) paramReaders[d.number(p)].push_back(int(i));
    }
  }
  const StringTable<const Op*> paramsByName = g.paramsByName();
  for (size_t o = 0; o < g.outputs.size(); ++o) {
    int p = producer(g.outputs[o]);
    if (p < 0) continue;
    d.liveToEnd[size_t(p)] = d.liveToEnd[size_t(p)] || storage.of(g.outputs[o]) != Storage::InPlace;
    d.outputBuffer[d.number(storage.root(g.outputs[o]))] = 1;
    if (storage.of(g.outputs[o]) != Storage::InPlace) continue;
    d.updates[size_t(p)] = true;
    const Op* param = paramsByName.at(g.updateOf(o));
    for (int reader : paramReaders[d.number(param->result())])
      if (reader != p) d.succ[size_t(reader)].push_back(p);
  }
  for (size_t i = 0; i < n; ++i)
    for (auto& r : d.real[i]->results)
      if (storage.of(r.get()) == Storage::Arena) {
        d.allocBytes[i] += bufferBytes(r->type);
        if (hasUser[i] || d.liveToEnd[i]) d.resultBytes[i] += bufferBytes(r->type);
      }
  return d;
}

// Which real ops are on the optimizer side: they reach an update output but no ordinary one.
std::vector<bool> optimizerSide(const DepGraph& d) {
  const size_t n = d.real.size();
  std::vector<bool> mainline(n, false), toUpdate(n, false), side(n, false);
  // Real ops are in a topological order of the data edges, so one backward pass settles both.
  for (size_t i = n; i-- > 0;) {
    mainline[i] = d.liveToEnd[i];
    toUpdate[i] = d.updates[i];
    for (int s : d.dataSucc[i]) {
      mainline[i] = mainline[i] || mainline[size_t(s)];
      toUpdate[i] = toUpdate[i] || toUpdate[size_t(s)];
    }
    side[i] = toUpdate[i] && !mainline[i];
  }
  return side;
}

// Step 1: a topological order. Ready ops marked `hoist` go first, the one ready longest
// first; then the ready op first in trace order. With `eager`, a ready op that frees at least
// as many Arena bytes as it allocates (the last reader of some buffers) goes before all
// that, the one that frees the most net first: a cheaper, local way to the same end when
// the gradients are smaller than the activations their GEMMs free.
std::vector<int> listSchedule(const DepGraph& d, const std::vector<bool>& hoist, bool eager, const std::string& fn) {
  const size_t n = d.real.size();
  std::vector<int> pending(n, 0);
  for (auto& ss : d.succ)
    for (int s : ss) ++pending[size_t(s)];
  std::vector<int> unscheduledReaders(d.numbers->numValues(), 0);  // by value number
  for (auto& ob : d.operandBuffers)
    for (const Value* b : ob) ++unscheduledReaders[d.number(b)];
  // Bytes op i would free net of what it allocates; nullopt when it frees nothing.
  auto netFreed = [&](int i) -> std::optional<int64_t> {
    int64_t freed = 0;
    for (const Value* b : d.operandBuffers[size_t(i)])
      if (unscheduledReaders[d.number(b)] == 1 && !d.isOutputBuffer(b)) freed += bufferBytes(b->type);
    if (freed == 0) return std::nullopt;
    return freed - d.allocBytes[size_t(i)];
  };
  // An op whose every reader is hoisted runs when ready too, though it also makes an
  // ordinary output: the loss, which AdamW reads (to skip the update of a non-finite loss),
  // would otherwise wait in trace order behind the whole backward, and every update with it.
  std::vector<bool> early = hoist;
  for (size_t i = 0; i < n; ++i)
    early[i] = hoist[i] || (!d.dataSucc[i].empty() && std::all_of(d.dataSucc[i].begin(), d.dataSucc[i].end(),
                                                                  [&](int s) { return bool(hoist[size_t(s)]); }));
  // (class, key, op): hoisted ops (class 0) keyed by when they became ready, the rest by
  // trace index.
  using Key = std::tuple<int, int, int>;
  std::set<Key> ready;
  std::vector<Key> keyOf(n);
  std::vector<bool> isReady(n, false);
  // With `eager`: the ready ops that free at least what they allocate, the most net first,
  // then in ready order (what a scan of `ready` for the strictly greatest net would pick).
  // An op's net changes only when a buffer it reads drops to one unscheduled reader, so it
  // is refreshed then, not recomputed over every ready op at every step (that scan was
  // quadratic in the layers: every param-only op of a deep model is ready from the start).
  std::set<std::pair<int64_t, Key>> freeing;
  std::vector<std::optional<int64_t>> netOf(n);
  auto refresh = [&](int i) {
    if (netOf[size_t(i)] && *netOf[size_t(i)] >= 0) freeing.erase({-*netOf[size_t(i)], keyOf[size_t(i)]});
    netOf[size_t(i)] = netFreed(i);
    if (netOf[size_t(i)] && *netOf[size_t(i)] >= 0) freeing.insert({-*netOf[size_t(i)], keyOf[size_t(i)]});
  };
  auto makeReady = [&](int i, int now) {
    keyOf[size_t(i)] = early[size_t(i)] ? Key{0, now, i} : Key{1, i, i};
    ready.insert(keyOf[size_t(i)]);
    isReady[size_t(i)] = true;
    if (eager) refresh(i);
  };
  for (size_t i = 0; i < n; ++i)
    if (pending[i] == 0) makeReady(int(i), -1);
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    auto pick = eager && !freeing.empty() ? ready.find(freeing.begin()->second) : ready.begin();
    const int i = std::get<2>(*pick);
    ready.erase(pick);
    if (eager && netOf[size_t(i)] && *netOf[size_t(i)] >= 0) freeing.erase({-*netOf[size_t(i)], keyOf[size_t(i)]});
    isReady[size_t(i)] = false;
    order.push_back(i);
    for (const Value* b : d.operandBuffers[size_t(i)])
      if (--unscheduledReaders[d.number(b)] == 1 && eager)  // its last reader now frees it
        for (int r : d.readersOf(b))
          if (isReady[size_t(r)]) refresh(r);
    for (int s : d.succ[size_t(i)])
      if (--pending[size_t(s)] == 0) makeReady(s, int(order.size()));
  }
  if (order.size() != n)
    throw Error("schedule: @" + fn + ": no valid order: a param is read after an op its in-place update depends on");
  return order;
}

// Step 2: sinking, in place on `order`.
void sink(const DepGraph& d, std::vector<int>& order) {
  const int n = int(order.size());
  std::vector<int> pos(d.real.size());
  for (int k = 0; k < n; ++k) pos[size_t(order[size_t(k)])] = k;
  auto bufferOwner = [&](const Value* b) { return d.realOf(b->def); };

  for (int at = n - 1; at >= 0; --at) {
    const int x = order[size_t(at)];
    if (communicates(d.real[size_t(x)]->kind)) continue;  // issued early on purpose (step 3)
    int target = n;
    for (int s : d.succ[size_t(x)]) target = std::min(target, pos[size_t(s)]);
    if (target <= at + 1 || d.resultBytes[size_t(x)] == 0) continue;
    int64_t cost = 0;
    for (const Value* b : d.operandBuffers[size_t(x)]) {
      if (d.isOutputBuffer(b)) continue;
      int last = pos[size_t(bufferOwner(b))];
      for (int r : d.readersOf(b))
        if (r != x) last = std::max(last, pos[size_t(r)]);
      if (last < target - 1) cost += bufferBytes(b->type);
    }
    if (d.resultBytes[size_t(x)] <= cost) continue;
    std::rotate(order.begin() + at, order.begin() + at + 1, order.begin() + target);
    for (int k = at; k < target; ++k) pos[size_t(order[size_t(k)])] = k;
  }
}

// The full op order: signature, then each real op preceded by the free ops it needs.
std::vector<Op*> assemble(const Graph& g, const DepGraph& d, const std::vector<int>& order) {
  std::vector<Op*> out;
  out.reserve(g.ops.size());
  std::vector<char> emitted(d.numbers->numOps(), 0);  // by op number
  for (auto& op : g.ops)
    if (isSignature(*op)) {
      out.push_back(op.get());
      emitted[d.numbers->of(op.get())] = 1;
    }
  std::function<void(Op*)> emit = [&](Op* op) {
    char& done = emitted[d.numbers->of(op)];
    if (done) return;
    done = 1;
    for (Value* v : op->operands)
      if (d.indexOf(v->def) < 0) emit(v->def);
    out.push_back(op);
  };
  for (int i : order) emit(d.real[size_t(i)]);
  for (auto& op : g.ops) emit(op.get());  // free ops that only feed outputs, or nothing
  return out;
}

// Step 3 on a complete order of g.ops: collectives as soon as ready; the readers of each one's
// results after the kCollectivesAhead-th next one. `order` unchanged when that gating would form
// a cycle (a collective that needs the update of an earlier one's reader).
//
// Why not after the next one: a bucket often closes a few small kernels after the previous
// one (buckets straddle layers), so a reader placed after the next collective waits on the
// device for a reduction that has only just started (traced on H200s: a stall the length of
// one bucket's reduction at every layer). Two collectives ahead leaves at least a bucket's
// worth of backward compute between a reduction's start and its first reader.
constexpr size_t kCollectivesAhead = 2;

std::vector<Op*> overlapCollectives(const Graph& g, const DepGraph& d, const std::vector<Op*>& order) {
  const size_t n = d.real.size();
  std::vector<int> rank(n, 0), collectives;
  {
    int k = 0;
    for (Op* op : order)
      if (const int i = d.indexOf(op); i >= 0) {
        rank[size_t(i)] = k++;
        if (communicates(op->kind)) collectives.push_back(i);
      }
  }
  if (collectives.empty()) return order;
  std::sort(collectives.begin(), collectives.end(), [&](int a, int b) { return rank[size_t(a)] < rank[size_t(b)]; });
  // The gating counts reductions only: an all_gather (ZeRO-1) sends what a reduction's reader
  // made, so a reader waiting for an all_gather would wait for itself (a cycle).
  std::vector<int> reductions;
  for (int c : collectives)
    if (d.real[size_t(c)]->kind != OpKind::AllGather) reductions.push_back(c);
  std::vector<std::vector<int>> succ = d.succ;
  for (size_t c = 0; c + kCollectivesAhead < reductions.size(); ++c)
    for (int u : d.dataSucc[size_t(reductions[c])])
      if (!communicates(d.real[size_t(u)]->kind)) succ[size_t(reductions[c + kCollectivesAhead])].push_back(u);
  std::vector<int> pending(n, 0);
  for (auto& ss : succ)
    for (int s : ss) ++pending[size_t(s)];
  // A reader of an all_gather's result (ZeRO-1: the bf16 copy of a gathered weight, which only
  // the next step reads) goes last: on the compute stream it would wait for its layer's
  // gathers, queued behind the reductions still in flight, and stall the backward behind it.
  std::vector<bool> deferred(n, false);
  for (int c : collectives)
    if (d.real[size_t(c)]->kind == OpKind::AllGather)
      for (int u : d.dataSucc[size_t(c)]) deferred[size_t(u)] = !communicates(d.real[size_t(u)]->kind);
  std::set<std::pair<int, int>> ready;  // (0 for a collective, 2 for a deferred reader, else 1; rank)
  auto makeReady = [&](int i) {
    ready.insert({communicates(d.real[size_t(i)]->kind) ? 0 : deferred[size_t(i)] ? 2 : 1, rank[size_t(i)]});
  };
  std::vector<int> byRank(n);
  for (size_t i = 0; i < n; ++i) byRank[size_t(rank[i])] = int(i);
  for (size_t i = 0; i < n; ++i)
    if (pending[i] == 0) makeReady(int(i));
  std::vector<int> out;
  out.reserve(n);
  while (!ready.empty()) {
    const int i = byRank[size_t(ready.begin()->second)];
    ready.erase(ready.begin());
    out.push_back(i);
    for (int s : succ[size_t(i)])
      if (--pending[size_t(s)] == 0) makeReady(s);
  }
  if (out.size() != n) return order;
  return assemble(g, d, out);
}

// Permutes g.ops into `order` (the same ops).
void reorder(Graph& g, const GraphNumbering& numbers, const std::vector<Op*>& order) {
  std::vector<std::unique_ptr<Op>> owned(numbers.numOps());  // by op number
  for (auto& op : g.ops) owned[numbers.of(op.get())] = std::move(op);
  for (size_t k = 0; k < order.size(); ++k) g.ops[k] = std::move(owned[numbers.of(order[k])]);
}

// Step 4: the side_stream record of every kernel, from ir/side_stream.h's rule.
bool markSideStream(Graph& g) {
  const PtrSet<const Value*> read = valuesRead(g);
  bool changed = false;
  for (auto& op : g.ops) {
    if (op->kind != OpKind::Kernel) continue;
    const bool side = offCriticalPath(*op, read);
    if (op->attrBool("side_stream") == side) continue;
    op->setAttr("side_stream", side);
    changed = true;
  }
  return changed;
}

bool scheduleGraph(Graph& g) {
  const StorageMap storage(g);
  const DepGraph d = buildDeps(g, storage);
  std::vector<Op*> original;
  for (auto& op : g.ops) original.push_back(op.get());
  struct Cost {
    int64_t peak = 0, area = 0;
    size_t peakAt = 0;  // a position in g.ops where the peak is reached
    auto key() const { return std::pair{peak, area}; }
  };
  auto cost = [&](Liveness& l) {
    l = computeLiveness(g, storage);
    Cost c{l.lowerBound, 0, 0};
    for (size_t k = 0; k < g.ops.size(); ++k) {
      if (d.indexOf(g.ops[k].get()) >= 0) c.area += l.liveBytes[k];  // where free ops stand must not matter
      if (l.liveBytes[k] == l.lowerBound) c.peakAt = k;
    }
    return c;
  };
  Liveness live;
  Cost bestCost = cost(live);
  std::vector<Op*> best = original;
  auto candidate = [&](const std::vector<bool>& hoist, bool eager) {
    std::vector<int> order = listSchedule(d, hoist, eager, g.name);
    sink(d, order);
    std::vector<Op*> ops = assemble(g, d, order);
    reorder(g, *d.numbers, ops);
    Cost c = cost(live);
    if (c.key() < bestCost.key()) {
      bestCost = c;
      best = std::move(ops);
    }
    return c;
  };
  for (bool eager : {false, true}) candidate(std::vector<bool>(d.real.size(), false), eager);

  // Hoisting the optimizer side, except ops that raise the peak: an op that makes a gradient
  // bigger than what it frees (lm_head's weight gradient from the logits' gradient) would, run
  // at the forward/backward turn, add to the peak; such ops (the largest buffer live at the
  // peak that hoisting made) keep trace order, a few at a time.
  std::vector<bool> hoist = optimizerSide(d);
  const bool collectives = std::any_of(d.real.begin(), d.real.end(), [](const Op* op) { return communicates(op->kind); });
  for (int round = 0; round < 16; ++round) {
    const Cost c = candidate(hoist, false);
    // With collectives, hoisting is what lets a bucket's reduction start during the backward
    // (step 3 needs its gradients made early): it wins at the same peak even where it keeps
    // gradients live longer (a bucket's wait for its last gradient) and loses on the sum.
    if (collectives && c.peak <= bestCost.peak) {
      bestCost = c;
      std::vector<int> order = listSchedule(d, hoist, false, g.name);
      sink(d, order);
      best = assemble(g, d, order);
    }
    if (c.peak <= bestCost.peak) break;
    int worst = -1;
    int64_t worstBytes = 0;
    for (const Buffer& b : live.buffers) {
      if (b.def > int(c.peakAt) || b.lastUse < int(c.peakAt)) continue;
      const int i = d.realOf(b.value->def);
      if (hoist[size_t(i)] && b.bytes > worstBytes) {
        worst = i;
        worstBytes = b.bytes;
      }
    }
    if (worst < 0) break;
    hoist[size_t(worst)] = false;
  }
  best = overlapCollectives(g, d, best);
  reorder(g, *d.numbers, best);
  return markSideStream(g) | (best != original);
}

}  // namespace

// It reorders top-level ops only.
std::unique_ptr<Pass> createSchedulePass() {
  return std::make_unique<FunctionPass>("schedule", &scheduleGraph, FunctionPass::Bodies::Leaves);
}

}  // namespace fusec
