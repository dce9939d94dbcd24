// The `data-parallel` pass (passes/data_parallel.h). It runs between autodiff and adamw, so
// the optimizer (and its skip of a non-finite loss) reads the mean gradients and the global
// loss, the same values on every rank: the ranks' weights never drift apart.
#include "passes/data_parallel.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "ir/builder.h"
#include "ir/collectives.h"
#include "passes/pass.h"
#include "passes/train_passes.h"
#include "passes/widen_gemm.h"
#include "support/ptr_hash.h"

namespace fusec {

bool appendGradientReduction(Graph& g, const DataParallelConfig& cfg) {
  if (cfg.ranks < 1) throw Error("data-parallel: ranks must be at least 1, got " + std::to_string(cfg.ranks));
  if (cfg.bucketBytes < 1) throw Error("data-parallel: the bucket size must be positive");
  if (!isFloat(cfg.reduceDType)) throw Error("data-parallel: gradients reduce in a float dtype");
  if (cfg.ranks == 1) return false;
  const std::vector<Op*> params = trainableParams(g);
  if (params.empty()) return false;
  bool shaped = g.outputs.size() == 1 + params.size() && g.outputs[0]->type.rank() == 0;
  for (size_t i = 0; shaped && i < params.size(); ++i) shaped = g.outputs[1 + i]->type == params[i]->result()->type;
  for (size_t i = 0; shaped && i < g.outputs.size(); ++i) shaped = g.updateOf(i).empty();
  if (!shaped)
    throw Error("data-parallel: @" + g.name + " must return the loss and one gradient per float param (" +
                std::to_string(1 + params.size()) + " values; run autodiff first, and adamw after), it returns " +
                std::to_string(g.outputs.size()));
  for (auto& op : g.ops)
    if (isCollective(op->kind)) throw Error("data-parallel: @" + g.name + " already has collectives");

  PtrMap<const Op*, size_t> position;
  for (size_t k = 0; k < g.ops.size(); ++k) position[g.ops[k].get()] = k;
  Builder b(g);
  const NamedAttrs mean = {{"ranks", cfg.ranks}, {"reduce", std::string("mean")}};

  Value* loss = b.create(OpKind::AllReduce, {g.outputs[0]}, mean).at(0);
  loss->name = "loss.mean";
  g.outputs[0] = loss;

  // Output slots of the gradients to reduce, in the order the backward makes them.
  std::vector<size_t> slots;
  for (size_t i = 1; i < g.outputs.size(); ++i)
    if (g.outputs[i]->def->kind != OpKind::Constant) slots.push_back(i);
  std::stable_sort(slots.begin(), slots.end(), [&](size_t a, size_t c) {
    return position.at(g.outputs[a]->def) < position.at(g.outputs[c]->def);
  });
  std::vector<size_t> bucket;
  int64_t bytes = 0;
  // A gradient the sharded optimizer splits by rows (its first dim divides by the ranks).
  auto sharded = [&](size_t i) {
    const Type& t = g.outputs[i]->type;
    return cfg.shardOptimizer && t.rank() > 0 && t.shape[0] % cfg.ranks == 0;
  };
  // Gradients travel in the wire dtype: cast to it before, back to their own after.
  const DType wire = cfg.reduceDType;
  PtrMap<const Value*, int> uses;
  for (auto& op : g.ops)
    for (const Value* v : op->operands) ++uses[v];
  for (const Value* v : g.outputs) ++uses[v];
  // A weight gradient is often cast(matmul) to the wire dtype (autocast's bf16 GEMM, then its
  // f32 master weight's dtype). Alone, that cast would be a kernel of its own before the
  // collective (it cannot fuse into a reader across the reduction), so the GEMM writes the
  // wire dtype itself (passes/widen_gemm.h).
  PtrSet<const Op*> foldedCasts;
  auto widenedGemm = [&](Value* x) -> Value* {
    // The cast goes, so nothing else may read it.
    Value* r = uses[x] == 1 ? widenGemmCast(x, [&](const Value* v) { return uses[v]; }) : nullptr;
    if (!r) return nullptr;
    r->name = x->name;
    foldedCasts.insert(x->def);
    return r;
  };
  auto reduce = [&](OpKind kind, const std::vector<size_t>& members, const char* suffix) {
    if (members.empty()) return;
    std::vector<Value*> grads;
    for (size_t i : members) {
      Value* x = g.outputs[i];
      if (x->type.dtype == wire)
        if (Value* r = widenedGemm(x)) x = r;
      grads.push_back(x->type.dtype == wire ? x : b.cast(x, wire));
    }
    std::vector<Value*> reduced = b.create(kind, grads, mean);
    for (size_t k = 0; k < members.size(); ++k) {
      const DType own = g.outputs[members[k]]->type.dtype;
      const std::string name = params[members[k] - 1]->attrStr("name") + suffix;
      if (own != wire) {
        reduced[k]->name = name + "." + std::string(dtypeName(wire));
        reduced[k] = b.cast(reduced[k], own);
      }
      reduced[k]->name = name;
      g.outputs[members[k]] = reduced[k];
    }
  };
  auto flush = [&] {
    std::vector<size_t> whole, rows;
    for (size_t i : bucket) (sharded(i) ? rows : whole).push_back(i);
    reduce(OpKind::AllReduce, whole, ".grad.mean");
    reduce(OpKind::ReduceScatter, rows, ".grad.shard");
    bucket.clear();
    bytes = 0;
  };
  for (size_t i : slots) {
    bucket.push_back(i);
    bytes += g.outputs[i]->type.numel() * dtypeBytes(g.outputs[i]->type.dtype);
    if (bytes >= cfg.bucketBytes) flush();
  }
  flush();
  g.eraseIf([&](Op* op) { return foldedCasts.count(op) != 0; });
  return true;
}

std::unique_ptr<Pass> createDataParallelPass(const DataParallelConfig& cfg) {
  class DataParallelPass : public Pass {
   public:
    explicit DataParallelPass(const DataParallelConfig& c) : cfg_(c) {}
    std::string_view name() const override { return "data-parallel"; }
    bool run(Module& m) override {
      bool changed = false;
      for (auto& f : m.funcs) changed |= appendGradientReduction(*f, cfg_);
      return changed;
    }

   private:
    DataParallelConfig cfg_;
  };
  return std::make_unique<DataParallelPass>(cfg);
}

// As registered (`--passes=data-parallel`, the .fir tests): two ranks, the default buckets.
std::unique_ptr<Pass> createDataParallelPass() { return createDataParallelPass(DataParallelConfig{2}); }

}  // namespace fusec
