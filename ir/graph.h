// The fusec IR: a Module of named functions; a function is a Graph of SSA ops in
// topological order whose results are typed Values. A `kernel` op owns a body Graph that is
// isolated from the enclosing one: its inputs are its own `input` ops, bound in order to
// the kernel's operands, and its outputs become the kernel's results.
#pragma once
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ir/error.h"
#include "ir/op_table.h"
#include "ir/types.h"
#include "support/inline_vector.h"
#include "support/slab_pool.h"
#include "support/string_table.h"

namespace fusec {

struct SourceLoc {
  int line = 0, col = 0;  // 1-based; 0 means "not from text"
  bool valid() const { return line > 0; }
};

Error errorAt(const std::string& file, SourceLoc loc, const std::string& msg);
std::string errorLine(const std::exception& e);  // "file:line:col: error: msg" or "error: msg"

struct Op;
struct Value;
class Graph;

// An op's operands and results, inline up to three operands and one result
// (support/inline_vector.h): a walk of the graph reads them with the op instead of from two
// more heap blocks.
using OperandList = InlineVector<Value*, 3>;
using ResultList = InlineVector<std::unique_ptr<Value>, 1>;

// Ops and values come from slabs (support/slab_pool.h): a graph stays dense in memory.
struct Value : SlabAllocated<Value> {
  Type type;
  Op* def = nullptr;  // the op that defines this value
  int index = 0;      // which result of `def`
  std::string name;   // optional; printed as %name (never all digits), else numbered
  // Byte offset of this value's storage, set by the memory-plan pass: in the function's
  // arena for computed values, in its resident region for inputs and params; -1 when
  // unplanned, and always for views, in-place updates and kernel-body values (see
  // passes/memory_plan.h). Printed after the type as `@offset`.
  int64_t offset = -1;
  // The verifier's stamp (ir/verifier.cpp): the id of the last walk of a graph that saw this
  // value defined. "Defined before this use, in this graph" is then one compare on a value
  // the walk reads anyway; a hash set of the defined values missed the caches on every
  // insert at a million values. A copied value carries a stale stamp, which no later walk has.
  // One graph is not verified by two threads at once.
  mutable uint64_t verifiedIn = 0;
};

struct Op : SlabAllocated<Op> {
  OpKind kind;
  // The op's dense number in a GraphNumbering (ir/numbering.h), for side tables that are
  // vectors instead of hash tables keyed by address: at a million ops those tables' random
  // probes missed the caches. Meaningful only through the numbering that set it (one at a
  // time per graph). Fits in the padding after `kind`.
  mutable uint32_t number = 0;
  OperandList operands;
  ResultList results;
  std::vector<AttrValue> attrs;  // one per OpInfo::attrs entry, defaults filled in
  std::unique_ptr<Graph> body;   // kernel ops only
  SourceLoc loc;

  const OpInfo& info() const { return opInfo(kind); }
  Value* result(int i = 0) const { return results.at(size_t(i)).get(); }
  int numResults() const { return int(results.size()); }

  const AttrValue& attr(std::string_view name) const;
  int64_t attrInt(std::string_view name) const;
  const std::vector<int64_t>& attrInts(std::string_view name) const;
  double attrFloat(std::string_view name) const;
  bool attrBool(std::string_view name) const;
  const std::string& attrStr(std::string_view name) const;
  void setAttr(std::string_view name, AttrValue v);
};

class Graph {
 public:
  std::string name;                       // function name (without '@'), or kernel name
  std::vector<std::unique_ptr<Op>> ops;   // topological order
  std::vector<Value*> outputs;
  // Empty, or one entry per output: the name of the `param` whose storage this output
  // overwrites in place (the next value of persistent state: a weight, an optimizer moment),
  // "" for an ordinary output. Printed as `return %w.new -> "w"`.
  std::vector<std::string> outputUpdates;
  SourceLoc loc;

  // The update target of output i ("" if none).
  const std::string& updateOf(size_t i) const;
  // Appends an output; a non-empty `updates` names the param it overwrites.
  void addOutput(Value* v, const std::string& updates = "");

  Op* append(std::unique_ptr<Op> op);
  std::vector<Op*> inputs() const;  // `input` ops, in order
  std::vector<Op*> params() const;  // `param` ops, in order
  Op* findInput(std::string_view name) const;
  Op* findParam(std::string_view name) const;
  // Every `param` by its name (the first of a duplicated name), for a pass that looks up many:
  // a findParam each is O(ops).
  StringTable<const Op*> paramsByName() const;

  // Rewrites every use of `from` (operands and outputs) to `to`. O(ops).
  void replaceAllUses(Value* from, Value* to);
  // Removes the ops for which `dead` is true. The caller guarantees no remaining use.
  template <class Pred>
  void eraseIf(Pred dead) {
    std::vector<std::unique_ptr<Op>> kept;
    kept.reserve(ops.size());
    for (auto& op : ops)
      if (!dead(op.get())) kept.push_back(std::move(op));
    ops = std::move(kept);
  }
};

class Module {
 public:
  std::string sourceName = "<input>";  // file name used in error locations
  std::vector<std::unique_ptr<Graph>> funcs;

  Graph* find(std::string_view name) const;
  Graph& add(std::string name);  // throws Error on a duplicate name
};

// Deep copies; value names, attributes, locations and bodies are preserved.
std::unique_ptr<Graph> cloneGraph(const Graph& g);
std::unique_ptr<Module> cloneModule(const Module& m);

// A fresh op of `kind` with default attributes and no operands or results.
std::unique_ptr<Op> makeOp(OpKind kind);
// A fresh `permute(x) {perm}` with its result typed (not yet in any graph).
std::unique_ptr<Op> makePermute(Value* x, std::vector<int64_t> perm);

}  // namespace fusec
