// The `autodiff` pass: turns a loss function into `loss, gradients...`, and a function with a
// cotangent input into its VJP (passes/train_passes.h).
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

namespace {

// Gives gradient grads[i] the name names[i] where it has none and the name is free (value
// names are unique per function), and makes `first` (if any) then the gradients the outputs.
void outputGradients(Graph& g, Value* first, const std::vector<Value*>& grads, const std::vector<std::string>& names) {
  std::unordered_set<std::string> taken;
  for (auto& op : g.ops)
    for (auto& r : op->results)
      if (!r->name.empty()) taken.insert(r->name);
  g.outputs.clear();
  g.outputUpdates.clear();
  if (first) g.addOutput(first);
  for (size_t i = 0; i < grads.size(); ++i) {
    // A gradient that is some other named value (or shared by two params, as for
    // loss = p + q) keeps its name.
    if (grads[i]->name.empty() && taken.insert(names[i]).second) grads[i]->name = names[i];
    g.addOutput(grads[i]);
  }
}

// A function with a cotangent input is a VJP program (attention_backward): its one output's
// adjoint is that input, and it returns the gradients w.r.t. its float data inputs ("d<name>")
// and weights ("<name>.grad"), in that order.
bool appendVjpOutputs(Graph& g, Op& cotangent) {
  const std::string what = "autodiff: @" + g.name + " has the cotangent input '" + cotangent.attrStr("name") + "'";
  if (g.outputs.size() != 1)
    throw Error(what + " and must return exactly one value, it returns " + std::to_string(g.outputs.size()));
  if (!g.outputUpdates.empty() && !g.updateOf(0).empty()) throw Error(what + "; its output must not be an in-place update");
  std::vector<Value*> wrt;
  std::vector<std::string> names;
  for (Op* in : g.inputs())
    if (in != &cotangent && roleOf(*in) == Role::Data && isFloat(in->result()->type.dtype)) {
      wrt.push_back(in->result());
      names.push_back("d" + in->attrStr("name"));
    }
  for (Op* p : trainableParams(g)) {
    wrt.push_back(p->result());
    names.push_back(p->attrStr("name") + ".grad");
  }
  if (wrt.empty()) throw Error(what + " but no float data input or weight to differentiate");
  outputGradients(g, nullptr, appendVjp(g, g.outputs[0], cotangent.result(), wrt), names);
  return true;
}

}  // namespace

bool appendLossGradients(Graph& g) {
  if (Op* cotangent = findInputByRole(g, Role::Cotangent)) return appendVjpOutputs(g, *cotangent);
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
  std::vector<std::string> names;
  for (Op* p : params) names.push_back(p->attrStr("name") + ".grad");
  outputGradients(g, loss, appendGradients(g, loss, wrt), names);
  return true;
}

namespace {
bool autodiffGraph(Graph& g) { return appendLossGradients(g); }
}  // namespace

std::unique_ptr<Pass> createAutodiffPass() { return std::make_unique<FunctionPass>("autodiff", &autodiffGraph); }

}  // namespace fusec
