// Dense numbers for one graph's ops and values, so that a pass's side tables are vectors
// indexed by number instead of hash tables keyed by address: at a million ops the random
// probes of those tables missed the caches, and the time a layer took grew with depth
// (issue 39).
//
// Ops are numbered in the graph's order when the numbering is made, in Op::number; a value's
// number is its op's first result's plus its index. A number names the op, not a place: the
// numbering stays valid while ops are reordered or removed, and for ops added through add();
// it stops being valid when another numbering of the same ops is made. So one numbering is
// made per pass, by whoever owns the pass's work (a pass, or a StorageMap the pass shares
// with the helpers it calls), and the helpers take it instead of making their own.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ir/graph.h"

namespace fusec {

class GraphNumbering {
 public:
  explicit GraphNumbering(const Graph& g);

  // Numbers an op made while the numbering is in use (a rewrite's replacement), after every
  // op it has; its results must be final.
  void add(const Op* op) {
    op->number = uint32_t(opOf_.size());
    opOf_.push_back(op);
    resultBase_.push_back(resultBase_.back() + op->results.size());
  }

  size_t numOps() const { return opOf_.size(); }
  // Whether `op` is one of the ops this numbering numbered (checked in full, in every build:
  // for a caller's "is this value of this graph" at its door, not for every lookup).
  bool contains(const Op* op) const { return op->number < opOf_.size() && opOf_[op->number] == op; }
  size_t numValues() const { return resultBase_.back(); }
  size_t of(const Op* op) const {
    check(op);
    return op->number;
  }
  size_t of(const Value* v) const { return resultBase_[of(v->def)] + size_t(v->index); }

 private:
  // Checks that the op is the one this numbering gave its number, so that a value of another
  // graph (a kernel body's), an op added since, or a numbering made over this one is an error
  // and not another value's entry. Release builds check the bound only: the whole check is a
  // load from opOf_ at every lookup, a cache miss where the lookups jump between layers
  // (it was 2% of a deep model's compile); the Debug build (CI's sanitizer run) checks it all.
  void check(const Op* op) const {
#ifdef NDEBUG
    if (op->number >= opOf_.size()) [[unlikely]]
      stale();
#else
    if (op->number >= opOf_.size() || opOf_[op->number] != op) stale();
#endif
  }
  [[noreturn]] static void stale();

  std::vector<const Op*> opOf_;      // by number
  std::vector<size_t> resultBase_;   // by op number: its first result's number; one past the end last
};

}  // namespace fusec
