// Dead code elimination: removes the ops none of whose results reach a graph output.
// Every op is pure, so liveness is plain reachability backwards from the outputs. `input`
// and `param` ops are a function's (or a kernel body's) signature and always stay. A kernel
// none of whose results is used is dropped as a whole; a live kernel loses its unused
// results (and the body outputs behind them: fewer stores), keeping its operands (its
// signature). Kernel bodies are then cleaned recursively.
#include <unordered_set>

#include "ir/numbering.h"
#include "passes/fusion/kernel_family.h"
#include "passes/pass.h"

namespace fusec {
namespace {

bool isSignature(const Op& op) { return op.kind == OpKind::Input || op.kind == OpKind::Param; }

// Drops the results of a live kernel that nothing uses, with their body outputs.
template <class Live>
bool pruneResults(Op& kernel, const Live& live) {
  Graph& body = *kernel.body;
  std::vector<std::unique_ptr<Value>> kept;
  std::vector<Value*> outs;
  std::vector<std::string> updates;
  for (size_t i = 0; i < kernel.results.size(); ++i) {
    if (!live(kernel.results[i].get())) continue;
    kept.push_back(std::move(kernel.results[i]));
    kept.back()->index = int(kept.size() - 1);
    outs.push_back(body.outputs.at(i));
    if (!body.outputUpdates.empty()) updates.push_back(body.outputUpdates.at(i));
  }
  if (kept.size() == kernel.results.size()) {
    for (size_t i = 0; i < kept.size(); ++i) kernel.results[i] = std::move(kept[i]);
    return false;
  }
  kernel.results = std::move(kept);
  body.outputs = std::move(outs);
  body.outputUpdates = std::move(updates);
  // Fewer outputs can make another family (a multi_tensor left with one element count): the
  // body changed, so what it is is decided again and recorded (kernel_family.h).
  // A body that fits no family now (only a hand-written one can) loses its record: codegen
  // then classifies it, and refuses it there with the reason.
  if (!kernel.attrStr("family").empty()) {
    try {
      const KernelFamily family = classifyKernel(body);
      recordKernelFamily(kernel, family, familyName(family) == kernel.attrStr("family") ? kernel.attrStr("hint") : "");
    } catch (const Error&) {
      kernel.setAttr("family", std::string());
      kernel.setAttr("hint", std::string());
    }
  }
  return true;
}

bool dceGraph(Graph& g) {
  const GraphNumbering numbers(g);  // tables by number (ir/numbering.h)
  std::vector<char> liveValue(numbers.numValues(), 0), dead(numbers.numOps(), 0);
  auto live = [&](const Value* v) { return liveValue[numbers.of(v)] != 0; };
  for (Value* v : g.outputs) liveValue[numbers.of(v)] = 1;

  bool changed = false;
  for (auto it = g.ops.rbegin(); it != g.ops.rend(); ++it) {
    Op& op = **it;
    bool isLive = isSignature(op);
    for (auto& r : op.results)
      if (!isLive && live(r.get())) isLive = true;
    if (!isLive) {
      dead[numbers.of(&op)] = changed = true;
      continue;
    }
    for (Value* v : op.operands) liveValue[numbers.of(v)] = 1;
  }

  if (changed) g.eraseIf([&](Op* op) { return dead[numbers.of(op)] != 0; });
  for (auto& op : g.ops)
    if (op->body) changed |= pruneResults(*op, live);
  for (auto& op : g.ops)
    if (op->body) changed |= dceGraph(*op->body);
  return changed;
}

}  // namespace

std::unique_ptr<Pass> createDCEPass() { return std::make_unique<FunctionPass>("dce", &dceGraph); }

}  // namespace fusec
