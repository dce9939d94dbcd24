// The `adamw` pass: appends torch.optim.AdamW (passes/adamw_update.h, the same math that
// models::buildTrainStep traces through fe::AdamW) to a function returning `loss, grads...`
// (passes/train_passes.h). The optimizer state and the step are declared next to the
// existing inputs and params, so the signature reads as if traced up front.
#include <list>
#include <map>
#include <optional>
#include <unordered_set>

#include "ir/builder.h"
#include "ir/roles.h"
#include "passes/adamw_update.h"
#include "passes/pass.h"
#include "passes/train_passes.h"

namespace fusec {
namespace {

// Moves the source ops appended at or after `mark` up beside the last existing op of their
// kind (inputs after the inputs, params after the params; else after the last source),
// keeping their order. One pass over a linked list: xl declares ~1000 new params, and
// inserting each into the op vector (after a scan for its slot) was quadratic.
void hoistNewSources(Graph& g, size_t mark) {
  using List = std::list<std::unique_ptr<Op>>;
  List fresh, all;
  for (size_t i = mark; i < g.ops.size(); ++i) fresh.push_back(std::move(g.ops[i]));
  g.ops.resize(mark);
  std::map<OpKind, List::iterator> lastOf;  // the last op of each kind
  std::optional<List::iterator> lastSource;
  auto isSource = [](OpKind k) { return k == OpKind::Input || k == OpKind::Param; };
  for (auto& op : g.ops) {
    auto it = all.insert(all.end(), std::move(op));
    lastOf[(*it)->kind] = it;
    if (isSource((*it)->kind)) lastSource = it;
  }
  for (auto& op : fresh) {
    const OpKind k = op->kind;
    auto same = lastOf.find(k);
    // Inserted after `after`; at the front when there is no source at all.
    std::optional<List::iterator> after = same != lastOf.end() ? std::optional(same->second) : lastSource;
    auto at = after ? std::next(*after) : all.begin();
    auto it = all.insert(at, std::move(op));
    if (isSource(k) && after == lastSource) lastSource = it;  // it now follows every other source
    lastOf[k] = it;
  }
  g.ops.clear();
  g.ops.reserve(all.size());
  for (auto& op : all) g.ops.push_back(std::move(op));
}

}  // namespace

// The ranks of the reduce_scatter that made `grad` when it holds this rank's rows of `param`'s
// gradient (passes/data_parallel.h, shardOptimizer), else 0.
int64_t shardRanks(const Value* grad, const Value* param) {
  const Value* reduced = grad;  // through the cast back from a bf16 wire
  if (reduced->def && reduced->def->kind == OpKind::Cast) reduced = reduced->def->operands.at(0);
  if (!reduced->def || reduced->def->kind != OpKind::ReduceScatter) return 0;
  const int64_t ranks = reduced->def->attrInt("ranks");
  Type whole = grad->type;
  if (whole.rank() == 0) return 0;
  whole.shape[0] *= ranks;
  return whole == param->type ? ranks : 0;
}

bool appendAdamWUpdate(Graph& g, const AdamWConfig& cfg) {
  std::vector<Op*> params = trainableParams(g);
  if (params.empty()) return false;
  bool shaped = g.outputs.size() == 1 + params.size() && g.outputs[0]->type.rank() == 0;
  for (size_t i = 0; shaped && i < params.size(); ++i)
    shaped = g.outputs[1 + i]->type == params[i]->result()->type || shardRanks(g.outputs[1 + i], params[i]->result()) > 0;
  for (size_t i = 0; shaped && i < g.outputs.size(); ++i) shaped = g.updateOf(i).empty();
  if (!shaped)
    throw Error("adamw: @" + g.name + " must return the loss and one gradient per float param (" +
                std::to_string(1 + params.size()) + " values; run autodiff first), it returns " +
                std::to_string(g.outputs.size()));
  if (g.findInput("step")) throw Error("adamw: @" + g.name + " already has an input named \"step\"");
  if (const Op* s = findInputByRole(g, Role::StepCount))
    throw Error("adamw: @" + g.name + " already has a step counter, \"" + s->attrStr("name") + "\"");

  Builder b(g);
  const size_t mark = g.ops.size();
  Value* step = b.input("step", Type{DType::f32, {}});
  step->name = "step";
  setRole(*step->def, Role::StepCount);
  std::vector<Value*> expAvg, expAvgSq;
  std::unordered_set<std::string> paramNames;  // once: a findParam per new name is O(ops)
  for (Op* p : g.params()) paramNames.insert(p->attrStr("name"));
  for (size_t i = 0; i < params.size(); ++i) {
    Op* p = params[i];
    const std::string name = p->attrStr("name");
    const Type& t = g.outputs[1 + i]->type;  // the gradient's: a shard's when the optimizer is sharded
    for (const char* suffix : {".exp_avg", ".exp_avg_sq"})
      if (paramNames.count(name + suffix)) throw Error("adamw: @" + g.name + " already has a param named \"" + name + suffix + "\"");
    expAvg.push_back(b.param(name + ".exp_avg", t));
    expAvg.back()->name = name + ".exp_avg";
    expAvgSq.push_back(b.param(name + ".exp_avg_sq", t));
    expAvgSq.back()->name = name + ".exp_avg_sq";
    for (auto [state, role] : {std::pair{expAvg.back(), Role::ExpAvg}, std::pair{expAvgSq.back(), Role::ExpAvgSq}}) {
      setRole(*state->def, role, name);
      setLayer(*state->def, layerOf(*p));
    }
  }
  hoistNewSources(g, mark);

  std::vector<Value*> grads(g.outputs.begin() + 1, g.outputs.end());
  Value* loss = g.outputs[0];
  // A step with a non-finite loss leaves every param and moment as it was (adamw_update.h).
  AdamWUpdate adamw(b, cfg, step, loss->type == Type{DType::f32, {}} ? loss : nullptr);
  g.outputs.clear();
  g.outputUpdates.clear();
  g.addOutput(loss);
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string name = params[i]->attrStr("name");
    // Sharded (the data-parallel pass reduce-scattered the gradient): this rank updates its
    // block of rows of the weight with its moments alone, and the ranks' updated blocks are
    // gathered into the whole weight, in place.
    const int64_t ranks = shardRanks(grads[i], params[i]->result());
    const NamedAttrs group = {{"ranks", ranks}};
    Value* w = ranks > 0 ? b.create1(OpKind::Shard, {params[i]->result()}, group) : params[i]->result();
    AdamWUpdate::Update u = adamw.update(w, grads[i], expAvg[i], expAvgSq[i]);
    if (ranks > 0) {
      u.param->name = name + ".shard.new";
      u.param = b.create1(OpKind::AllGather, {u.param}, group);
    }
    u.param->name = name + ".new";
    u.expAvg->name = name + ".exp_avg.new";
    u.expAvgSq->name = name + ".exp_avg_sq.new";
    g.addOutput(u.param, name);  // written in place over the weight and its moments
    g.addOutput(u.expAvg, name + ".exp_avg");
    g.addOutput(u.expAvgSq, name + ".exp_avg_sq");
  }
  return true;
}

std::unique_ptr<Pass> createAdamWPass(const AdamWConfig& cfg) {
  class AdamWPass : public Pass {
   public:
    explicit AdamWPass(const AdamWConfig& c) : cfg_(c) {}
    std::string_view name() const override { return "adamw"; }
    bool run(Module& m) override {
      bool changed = false;
      for (auto& f : m.funcs) changed |= appendAdamWUpdate(*f, cfg_);
      return changed;
    }

   private:
    AdamWConfig cfg_;
  };
  return std::make_unique<AdamWPass>(cfg);
}

std::unique_ptr<Pass> createAdamWPass() { return createAdamWPass(AdamWConfig{}); }

}  // namespace fusec
