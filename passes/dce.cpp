// Dead code elimination: removes the ops none of whose results reach a graph output.
// Every op is pure, so liveness is plain reachability backwards from the outputs. `input`
// and `param` ops are a function's (or a kernel body's) signature and always stay. Kernel
// bodies are cleaned too; a kernel keeps all its results (its arity is its interface), and
// a kernel none of whose results is used is dropped as a whole.
#include <unordered_set>

#include "passes/pass.h"

namespace fusec {
namespace {

bool isSignature(const Op& op) { return op.kind == OpKind::Input || op.kind == OpKind::Param; }

bool dceGraph(Graph& g) {
  std::unordered_set<const Value*> live;
  live.reserve(g.ops.size() * 2);
  for (Value* v : g.outputs) live.insert(v);

  std::unordered_set<const Op*> dead;
  for (auto it = g.ops.rbegin(); it != g.ops.rend(); ++it) {
    Op& op = **it;
    bool isLive = isSignature(op);
    for (auto& r : op.results)
      if (!isLive && live.count(r.get())) isLive = true;
    if (!isLive) {
      dead.insert(&op);
      continue;
    }
    for (Value* v : op.operands) live.insert(v);
  }

  bool changed = !dead.empty();
  if (changed) g.eraseIf([&](Op* op) { return dead.count(op) != 0; });
  for (auto& op : g.ops)
    if (op->body) changed |= dceGraph(*op->body);
  return changed;
}

}  // namespace

std::unique_ptr<Pass> createDCEPass() { return std::make_unique<FunctionPass>("dce", &dceGraph); }

}  // namespace fusec
