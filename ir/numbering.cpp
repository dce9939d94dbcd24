#include "ir/numbering.h"

#include <cstdint>

namespace fusec {

GraphNumbering::GraphNumbering(const Graph& g) {
  if (g.ops.size() > UINT32_MAX) throw Error("more than 2^32 ops in one function");
  opOf_.reserve(g.ops.size());
  resultBase_.reserve(g.ops.size() + 1);
  size_t values = 0;
  for (auto& op : g.ops) {
    op->number = uint32_t(opOf_.size());
    opOf_.push_back(op.get());
    resultBase_.push_back(values);
    values += op->results.size();
  }
  resultBase_.push_back(values);
}

void GraphNumbering::stale() {
  throw Error("internal: an op read by a graph numbering it is not numbered in (added since, from another graph, or "
              "renumbered)");
}

}  // namespace fusec
