// The `shard-master-weights` pass: ZeRO-1 with bf16 compute keeps each f32 master weight as
// one rank's block of rows, and gathers the bf16 copy the GEMMs read instead of the f32 weight.
//
// After data-parallel (shardOptimizer), adamw and cache-weight-casts, a sharded weight W reads
//   rows     = adamw(shard(W), reduce_scatter(grad), moments)   this rank's new rows, f32
//   W.new    = all_gather(rows)        -> "W"                   4 bytes a parameter cross
//   W.bf16.new = cast(W.new -> bf16)   -> "W.bf16"              a full-size cast on every rank
// Nothing but shard(W) reads the f32 weight (the forward and backward read W.bf16), so every
// rank needs only its own rows of it. Where that holds, W becomes a param of the rows' type
// (attribute ranks: frontend/program_state.h binds this rank's rows, the runtime reads it back
// whole), shard(W) becomes W, and
//   W       <- rows                                            in place, no exchange
//   W.bf16  <- all_gather(cast(rows -> bf16))                  2 bytes a parameter cross
// with one all_gather for the copies of a layer's weights (a launch a layer, not a weight), which
// the layer's weights still gathered in f32 (norms, read whole in the step) join.
// The values every rank computes are the same bits: a cast of gathered rows is the gather of
// the cast rows. A weight anything else reads whole (an f32 program's, a norm weight the
// forward reads in f32) is left as it was.
#include <map>
#include <unordered_map>

#include "ir/builder.h"
#include "ir/roles.h"
#include "passes/pass.h"
#include "support/ptr_hash.h"

namespace fusec {
namespace {

struct Sharding {
  Op* weight;
  size_t slot;      // the output written over the weight
  size_t copySlot;  // the output written over its bf16 copy
  Value* rows;      // this rank's new rows
  int64_t ranks;
};

bool shardMasterWeights(Graph& g) {
  PtrMap<const Value*, std::vector<Op*>> readers;
  PtrMap<const Value*, int> returned;
  for (auto& op : g.ops)
    for (Value* v : op->operands) readers[v].push_back(op.get());
  PtrMap<const Value*, size_t> slotOfValue;  // an output returned once -> its slot (a scan per weight was quadratic)
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    ++returned[g.outputs[i]];
    slotOfValue[g.outputs[i]] = i;
  }
  std::unordered_map<std::string, const Op*> paramNamed;  // once: a findParam per output is O(ops)
  for (const Op* p : g.params()) paramNamed.emplace(p->attrStr("name"), p);
  auto paramOf = [&](const std::string& name) -> const Op* {
    auto it = paramNamed.find(name);
    return it == paramNamed.end() ? nullptr : it->second;
  };
  std::unordered_map<std::string, size_t> slotOf;  // update target -> its output
  for (size_t i = 0; i < g.outputs.size(); ++i)
    if (!g.updateOf(i).empty()) slotOf[g.updateOf(i)] = i;
  auto readersOf = [&](const Value* v) -> const std::vector<Op*>& {
    static const std::vector<Op*> none;
    auto it = readers.find(v);
    return it == readers.end() ? none : it->second;
  };

  std::vector<Sharding> plan;
  for (Op* p : g.params()) {
    if (roleOf(*p) != Role::Weight || p->attrInt("ranks") != 1) continue;
    const std::string& name = p->attrStr("name");
    auto slot = slotOf.find(name);
    if (slot == slotOf.end()) continue;
    Value* gathered = g.outputs[slot->second];
    if (!gathered->def || gathered->def->kind != OpKind::AllGather || returned[gathered] != 1) continue;
    const int64_t ranks = gathered->def->attrInt("ranks");
    // Only this rank's rows of the weight are read (by the optimizer).
    const std::vector<Op*>& uses = readersOf(p->result());
    bool rowsOnly = !uses.empty() && returned[p->result()] == 0;
    for (const Op* u : uses) rowsOnly = rowsOnly && u->kind == OpKind::Shard && u->attrInt("ranks") == ranks;
    if (!rowsOnly) continue;
    // The gathered weight feeds only the refresh of its bf16 copy.
    const std::vector<Op*>& gatheredBy = readersOf(gathered);
    if (gatheredBy.size() != 1 || gatheredBy[0]->kind != OpKind::Cast) continue;
    Value* copy = gatheredBy[0]->result();
    if (returned[copy] != 1 || !readersOf(copy).empty()) continue;
    const size_t copySlot = slotOfValue.at(copy);
    const Op* copyParam = paramOf(g.updateOf(copySlot));
    if (!copyParam || roleOf(*copyParam) != Role::WeightCopy || ownerOf(*copyParam) != name) continue;
    plan.push_back({p, slot->second, copySlot, gathered->def->operands[0], ranks});
  }
  if (plan.empty()) return false;

  Builder b(g);
  PtrMap<const Value*, Value*> replaced;  // shard(W) -> W
  struct Gathered {
    Value* rows;  // this rank's rows of a bf16 copy, or of an f32 weight the step reads whole
    size_t slot;  // the update output it gathers into
    std::string name;
  };
  std::map<std::pair<int64_t, int64_t>, std::vector<Gathered>> byLayer;  // (layer, ranks) -> its gathers
  std::vector<std::pair<int64_t, int64_t>> layers;                        // in the order they come
  PtrSet<const Op*> dead;
  for (const Sharding& s : plan) {
    Value* w = s.weight->result();
    w->type = s.rows->type;
    s.weight->setAttr("ranks", s.ranks);
    for (Op* u : readersOf(w)) {
      replaced[u->result()] = w;
      dead.insert(u);
    }
    Value* oldCopy = g.outputs[s.copySlot];
    const std::string copyName = g.updateOf(s.copySlot);
    dead.insert(oldCopy->def);
    dead.insert(g.outputs[s.slot]->def);
    g.outputs[s.slot] = s.rows;
    Value* low = b.cast(s.rows, oldCopy->type.dtype);
    low->name = copyName + ".shard.new";
    const std::pair<int64_t, int64_t> key{layerOf(*s.weight), s.ranks};
    if (!byLayer.count(key)) layers.push_back(key);
    byLayer[key].push_back({low, s.copySlot, oldCopy->name});
  }
  // The weights still gathered in f32 (a norm's, which the step reads whole), where nothing
  // in the step reads the gathered value, join their layer's gather.
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    Op* d = g.outputs[i]->def;
    if (!d || d->kind != OpKind::AllGather || d->operands.size() != 1 || dead.count(d) || returned[g.outputs[i]] != 1 ||
        !readersOf(g.outputs[i]).empty())
      continue;
    const Op* target = paramOf(g.updateOf(i));
    if (!target || roleOf(*target) != Role::Weight) continue;
    const std::pair<int64_t, int64_t> key{layerOf(*target), d->attrInt("ranks")};
    if (!byLayer.count(key)) layers.push_back(key);
    byLayer[key].push_back({d->operands[0], i, g.outputs[i]->name});
    dead.insert(d);
  }
  // A layer's gathers cross in one all_gather (one NCCL launch, not one a weight).
  for (const auto& key : layers) {
    const std::vector<Gathered>& members = byLayer.at(key);
    std::vector<Value*> lows;
    for (const Gathered& m : members) lows.push_back(m.rows);
    const std::vector<Value*> gathered = b.create(OpKind::AllGather, lows, {{"ranks", key.second}});
    for (size_t i = 0; i < members.size(); ++i) {
      gathered[i]->name = members[i].name;
      g.outputs[members[i].slot] = gathered[i];
    }
  }
  for (auto& op : g.ops)
    for (Value*& v : op->operands)
      if (auto it = replaced.find(v); it != replaced.end()) v = it->second;
  g.eraseIf([&](Op* op) { return dead.count(op) != 0; });
  return true;
}

}  // namespace

std::unique_ptr<Pass> createShardMasterWeightsPass() {
  return std::make_unique<FunctionPass>("shard-master-weights", &shardMasterWeights);
}

}  // namespace fusec
