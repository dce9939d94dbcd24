// Every value's readers in program order (an op that reads a value twice is listed twice),
// as one array sliced by value number (ir/numbering.h), and how many graph outputs each value
// is. Half a million small vectors, one a value, were the allocator's busiest work in the
// passes that need readers.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "ir/graph.h"
#include "ir/numbering.h"

namespace fusec {

class UseLists {
 public:
  // The readers as `g` has them now; `numbers` numbers g and outlives this.
  UseLists(const Graph& g, const GraphNumbering& numbers);

  std::span<Op* const> readers(const Value* v) const {
    const uint32_t l = listOf_[numbers_.of(v)];
    return {list_.data() + start_[l], list_.data() + start_[l + 1]};
  }
  int outputs(const Value* v) const { return outputs_[numbers_.of(v)]; }
  size_t uses(const Value* v) const { return readers(v).size() + size_t(outputs(v)); }

  // After a rewrite that made `to` stand for `from` everywhere: `to` has `from`'s readers and
  // outputs (its own are gone), and `from` has none.
  void moveUses(const Value* from, const Value* to);

 private:
  const GraphNumbering& numbers_;
  std::vector<size_t> start_;      // by list: where its readers begin in list_; one past the end last
  std::vector<Op*> list_;          // the readers, list by list
  std::vector<uint32_t> listOf_;   // by value number: its list (its own, an empty one, or a moved one)
  std::vector<int> outputs_;       // by value number
};

}  // namespace fusec
