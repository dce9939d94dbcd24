#include "ir/use_lists.h"

namespace fusec {

UseLists::UseLists(const Graph& g, const GraphNumbering& numbers)
    : numbers_(numbers), listOf_(numbers.numValues()), outputs_(numbers.numValues(), 0) {
  const size_t values = numbers.numValues();
  if (values >= UINT32_MAX) throw Error("more than 2^32 - 1 values in one function");
  // List i is value i's; list `values` is the empty one a value whose uses moved is given.
  start_.assign(values + 2, 0);
  for (auto& op : g.ops)
    for (const Value* v : op->operands) ++start_[numbers.of(v) + 1];
  for (size_t i = 0; i <= values; ++i) start_[i + 1] += start_[i];
  list_.resize(start_[values]);
  std::vector<size_t> next(start_.begin(), start_.begin() + std::ptrdiff_t(values));
  for (auto& op : g.ops)
    for (const Value* v : op->operands) list_[next[numbers.of(v)]++] = op.get();
  for (size_t i = 0; i < values; ++i) listOf_[i] = uint32_t(i);
  for (const Value* v : g.outputs) ++outputs_[numbers.of(v)];
}

void UseLists::moveUses(const Value* from, const Value* to) {
  const size_t f = numbers_.of(from), t = numbers_.of(to);
  listOf_[t] = listOf_[f];
  outputs_[t] = outputs_[f];
  listOf_[f] = uint32_t(outputs_.size());  // the empty list
  outputs_[f] = 0;
}

}  // namespace fusec
