#include "ir/verifier.h"

#include <atomic>
#include <optional>
#include <string_view>
#include <unordered_set>

#include "ir/printer.h"
#include "ir/roles.h"
#include "ir/side_stream.h"
#include "ir/step_invariant.h"
#include "ir/type_rules.h"
#include "support/string_table.h"

namespace fusec {
namespace {

bool validValueName(const std::string& n) {
  if (n.empty()) return true;
  bool allDigits = true;
  for (char c : n) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) return false;
    if (!std::isdigit(static_cast<unsigned char>(c))) allDigits = false;
  }
  return !allDigits;
}

class Verifier {
 public:
  Verifier(const std::string& file, KernelBodies bodies) : file_(file), walkBodies_(bodies == KernelBodies::Verify) {
#ifndef NDEBUG
    walkBodies_ = true;  // Debug builds check every body (ir/verifier.h)
#endif
  }

  // Linear in the graph: it runs after every pass, so the per-op work is lookups into sets
  // built here (keys view the graph's own strings) and the messages are built only to fail.
  void graph(const Graph& g, const std::string& where) {
    // A fresh id per graph walk (a nested kernel body gets its own): values of other
    // graphs, or of this one defined further down, carry another stamp.
    static std::atomic<uint64_t> walks{0};
    const uint64_t walk = ++walks;
    auto defined = [walk](const Value* v) { return v->verifiedIn == walk; };
    // Keys view the graph's own strings.
    StringTable<bool> names(g.ops.size()), inputNames;
    StringTable<const Op*> params;
    std::vector<const Op*> paramOps;  // in graph order, for owners()
    std::vector<const Op*> sideStream;  // kernels recorded side_stream, checked at the end
    std::unordered_set<std::string> roleInputs;
    std::vector<Type> operandTypes, resultTypes, inferred;  // reused: copying into them keeps capacity
    for (size_t k = 0; k < g.ops.size(); ++k) {
      const Op& op = *g.ops[k];
      auto fail = [&](const std::string& msg) -> void {
        std::string ctx = op.loc.valid() ? "" : where + ", op #" + std::to_string(k) + " (" + std::string(op.info().name) + "): ";
        throw errorAt(file_, op.loc, ctx + msg);
      };
      if (size_t(op.kind) >= allOps().size()) fail("unknown op kind");
      const OpInfo& info = op.info();
      if (op.attrs.size() != info.attrs.size()) fail(std::string(info.name) + " has the wrong number of attributes");
      for (size_t i = 0; i < info.attrs.size(); ++i)
        if (!attrValueMatches(op.attrs[i], info.attrs[i].kind))
          fail(std::string(info.name) + " attribute '" + info.attrs[i].name + "' must be of kind " +
               std::string(attrKindName(info.attrs[i].kind)));
      operandTypes.resize(op.operands.size());
      resultTypes.resize(op.results.size());
      for (size_t i = 0; i < op.operands.size(); ++i) {
        const Value* v = op.operands[i];
        if (!v) fail("operand " + std::to_string(i) + " is null");
        if (!defined(v)) fail("operand " + std::to_string(i) + " is used before it is defined (or comes from another graph)");
        operandTypes[i] = v->type;
      }
      for (size_t i = 0; i < op.results.size(); ++i) {
        const Value& r = *op.results[i];
        if (r.def != &op || r.index != int(i)) fail("result " + std::to_string(i) + " has a wrong back-link");
        if (!validValueName(r.name)) fail("invalid value name '%" + r.name + "'");
        if (!r.name.empty() && !names.insert(r.name)) fail("duplicate value name %" + r.name);
        // Empty tensors are refused here, once, rather than handled by every pass and kernel
        // family (autodiff divided by a zero dimension; a kernel of no elements would have
        // no grid).
        for (int64_t d : r.type.shape)
          if (d == 0)
            fail("%" + (r.name.empty() ? std::to_string(i) : r.name) + " has type " + r.type.str() +
                 ": fusec does not support tensors with a zero-size dimension");
        resultTypes[i] = r.type;
      }
      if (op.body && op.kind != OpKind::Kernel) fail(std::string(info.name) + " cannot have a body");
      try {
        checkResultTypes(info, operandTypes, op.attrs, resultTypes, op.body.get(), inferred);
      } catch (const Error& e) {
        if (e.located) throw;
        fail(e.what());
      }
      if (op.kind == OpKind::Input && !inputNames.insert(op.attrStr("name")))
        fail("duplicate input name \"" + op.attrStr("name") + "\"");
      if (op.kind == OpKind::Param && !params.emplace(op.attrStr("name"), &op))
        fail("duplicate param name \"" + op.attrStr("name") + "\"");
      if (op.kind == OpKind::Param) paramOps.push_back(&op);
      if (op.kind == OpKind::Input || op.kind == OpKind::Param) role(op, fail, roleInputs);
      if (op.kind == OpKind::Kernel && op.attrBool("step_invariant"))
        for (size_t i = 0; i < op.operands.size(); ++i)
          if (!isStepInvariantValue(op.operands[i]))
            fail("kernel \"" + op.attrStr("name") + "\" is recorded step_invariant but its operand " + std::to_string(i) +
                 " changes from step to step");
      if (op.kind == OpKind::Kernel && op.attrBool("side_stream")) sideStream.push_back(&op);
      if (op.body && walkBodies_) graph(*op.body, where + " kernel \"" + op.attrStr("name") + "\"");
      for (auto& r : op.results) r->verifiedIn = walk;
    }
    owners(g, paramOps, params, where);
    if (!sideStream.empty()) {  // ir/side_stream.h: the runtime would run them beside their readers
      const PtrSet<const Value*> read = valuesRead(g);
      for (const Op* op : sideStream)
        if (!offCriticalPath(*op, read))
          throw errorAt(file_, op->loc, where + ": kernel \"" + op->attrStr("name") +
                                            "\" is recorded side_stream but a later op reads its results (or it is step-invariant)");
    }
    for (size_t i = 0; i < g.outputs.size(); ++i)
      if (!g.outputs[i] || !defined(g.outputs[i]))
        throw errorAt(file_, g.loc, where + ": returned value " + std::to_string(i) + " is not defined in this graph");
    updates(g, params, where);
  }

  // The role attributes (ir/roles.h): a role of the op's kind, an `of` exactly for state and
  // copies, a layer of -1 or more, and at most one input of each non-data role.
  template <class Fail>
  void role(const Op& op, const Fail& fail, std::unordered_set<std::string>& roleInputs) {
    const std::string& text = op.attrStr("role");
    const std::optional<Role> r = parseRole(text);
    if (!r || !roleFits(*r, op.kind))
      fail("\"" + text + "\" is not a role of " + std::string(op.info().name) + " (" +
           (op.kind == OpKind::Param ? "weight, exp_avg, exp_avg_sq, bf16_copy" : "ids, targets, step, or none") + ")");
    if (roleHasOwner(*r) && op.attrStr("of").empty()) fail("a " + text + " param needs `of`, the weight it belongs to");
    if (!roleHasOwner(*r) && !op.attrStr("of").empty())
      fail("`of` belongs to optimizer state and weight copies, not to a " + (text.empty() ? std::string("data") : text) + " " +
           std::string(op.info().name));
    if (op.attrInt("layer") < -1) fail("layer must be -1 (outside the blocks) or more, got " + std::to_string(op.attrInt("layer")));
    if (op.kind == OpKind::Param) {
      const int64_t ranks = op.attrInt("ranks");
      if (ranks < 1) fail("ranks must be 1 or more, got " + std::to_string(ranks));
      if (ranks > 1 && (*r != Role::Weight || op.result()->type.rank() == 0))
        fail("only a weight with rows is held as one rank's block of rows (ranks " + std::to_string(ranks) + ")");
    }
    if (op.kind == OpKind::Input && *r != Role::Data && !roleInputs.insert(text).second)
      fail("two inputs have the role \"" + text + "\"");
  }

  // Each `of` names a weight of the same graph.
  void owners(const Graph& g, const std::vector<const Op*>& paramOps, const StringTable<const Op*>& params,
              const std::string& where) {
    for (const Op* p : paramOps) {
      const std::string& of = p->attrStr("of");
      if (of.empty()) continue;
      const Op* const* w = params.find(of);
      if (!w || (*w)->attrStr("role") != roleName(Role::Weight))
        throw errorAt(file_, p->loc.valid() ? p->loc : g.loc,
                      where + ": param \"" + p->attrStr("name") + "\" belongs to \"" + of + "\", which is not a weight of this function");
    }
  }

  // In-place state updates: each target is a param of this graph with the output's type,
  // named once; kernel bodies have none (they are isolated and stateless).
  // `params` by name: a findParam per update output made this quadratic (xl updates ~1400).
  void updates(const Graph& g, const StringTable<const Op*>& params, const std::string& where) {
    if (g.outputUpdates.empty()) return;
    auto fail = [&](const std::string& msg) { throw errorAt(file_, g.loc, where + ": " + msg); };
    if (g.outputUpdates.size() != g.outputs.size())
      fail(std::to_string(g.outputUpdates.size()) + " update targets for " + std::to_string(g.outputs.size()) + " outputs");
    StringTable<bool> seen(g.outputs.size());
    for (size_t i = 0; i < g.outputs.size(); ++i) {
      const std::string& t = g.outputUpdates[i];
      if (t.empty()) continue;
      if (where.find(" kernel ") != std::string::npos) fail("a kernel body cannot update a param");
      const Op* const* found = params.find(t);
      const Op* p = found ? *found : nullptr;
      if (!p) fail("returned value " + std::to_string(i) + " updates \"" + t + "\", which is not a param");
      if (p->result()->type != g.outputs[i]->type)
        fail("returned value " + std::to_string(i) + " has type " + g.outputs[i]->type.str() + " but updates param \"" + t +
             "\" of type " + p->result()->type.str());
      if (!seen.insert(t)) fail("param \"" + t + "\" is updated twice");
    }
  }

 private:
  const std::string& file_;
  bool walkBodies_;
};

}  // namespace

void verifyGraph(const Graph& g, const std::string& sourceName) {
  Verifier(sourceName, KernelBodies::Verify).graph(g, "@" + g.name);
}

void verify(const Module& m) { verify(m, KernelBodies::Verify); }

void verify(const Module& m, KernelBodies bodies) {
  std::unordered_set<std::string> names;
  for (auto& f : m.funcs) {
    if (!names.insert(f->name).second) throw errorAt(m.sourceName, f->loc, "duplicate function @" + f->name);
    Verifier(m.sourceName, bodies).graph(*f, "@" + f->name);
  }
}

}  // namespace fusec
