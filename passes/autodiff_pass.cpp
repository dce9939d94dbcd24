// The `autodiff` pass: turns a loss function into `loss, gradients...` (passes/train_passes.h).
// A function without float params (e.g. @attention beside a model) is skipped rather than
// rejected, so the pass can run over a whole module; one with params but some other
// signature is an error, because silently leaving it undifferentiated would hand adamw
// something it cannot update.
#include <string>
#include <unordered_set>

#include "passes/autodiff.h"
#include "ir/roles.h"
#include "passes/pass.h"
#include "passes/train_passes.h"

namespace fusec {

std::vector<Op*> trainableParams(const Graph& g) {
  std::vector<Op*> out;
  for (Op* p : g.params())
    if (isFloat(p->result()->type.dtype) && roleOf(*p) == Role::Weight) out.push_back(p);
  return out;
}

bool appendLossGradients(Graph& g) {
  std::vector<Op*> params = trainableParams(g);
  if (params.empty()) return false;
  const bool scalarLoss = g.outputs.size() == 1 && g.outputs[0]->type.rank() == 0 && isFloat(g.outputs[0]->type.dtype);
  if (!scalarLoss)
    throw Error("autodiff: @" + g.name + " must return exactly one float scalar (the loss), it returns " +
                std::to_string(g.outputs.size()) + " value(s)" +
                (g.outputs.empty() ? std::string() : ", the first " + g.outputs[0]->type.str()));
  if (!g.outputUpdates.empty() && !g.updateOf(0).empty())
    throw Error("autodiff: the loss of @" + g.name + " must not be an in-place update");

  Value* loss = g.outputs[0];
  std::vector<Value*> wrt;
  for (Op* p : params) wrt.push_back(p->result());
  std::vector<Value*> grads = appendGradients(g, loss, wrt);

  std::unordered_set<std::string> taken;
  for (auto& op : g.ops)
    for (auto& r : op->results)
      if (!r->name.empty()) taken.insert(r->name);
  g.outputs.clear();
  g.outputUpdates.clear();
  g.addOutput(loss);
  for (size_t i = 0; i < grads.size(); ++i) {
    // A gradient that is some other named value (or shared by two params, as for
    // loss = p + q) keeps its name: value names are unique per function.
    std::string name = params[i]->attrStr("name") + ".grad";
    if (grads[i]->name.empty() && taken.insert(name).second) grads[i]->name = name;
    g.addOutput(grads[i]);
  }
  return true;
}

namespace {
bool autodiffGraph(Graph& g) { return appendLossGradients(g); }
}  // namespace

std::unique_ptr<Pass> createAutodiffPass() { return std::make_unique<FunctionPass>("autodiff", &autodiffGraph); }

}  // namespace fusec
