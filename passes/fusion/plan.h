// The fuse pass's decisions for one graph, before any rewriting: which ops are recomputed
// inside their consumers, which stay at top level, and which ops share a kernel.
#pragma once
#include <unordered_set>
#include <vector>

#include "ir/graph.h"
#include "ir/numbering.h"
#include "passes/fusion/domain.h"

namespace fusec::fusion {

struct Plan {
  // The graph's ops by number (ir/numbering.h), as the planner numbered them: the tables
  // below and the outliner's are by these numbers.
  GraphNumbering numbers;
  // By op number. Inlined: cloned into every kernel that reads it instead of being
  // materialised: views, constants, iotas, and pointwise ops reading at most one
  // materialised tensor (so a recompute reads no more memory than loading the saved value
  // would). Kept top: an inlined op that also stays at top level: views read in place by
  // GEMMs, kept views or graph outputs, and constants/iotas feeding them.
  std::vector<char> inlinedOps, keptTopOps;
  bool inlined(const Op* op) const { return inlinedOps[numbers.of(op)] != 0; }
  bool keptTop(const Op* op) const { return keptTopOps[numbers.of(op)] != 0; }
  struct Kernel {
    std::vector<Op*> members;   // graph order
    std::vector<Value*> results;  // member values read outside the kernel, graph order
    Domain domain;
  };
  std::vector<Kernel> kernels;
  // The top level in a valid order: a fixed op (source, GEMM, existing kernel, resident
  // concat) or a kernel index. Kept views and constants are placed before their first user.
  struct Node {
    Op* fixed = nullptr;
    int kernel = -1;
  };
  std::vector<Node> order;
  bool changes = false;  // false when the graph is already fused
};

// Throws Error for ops fuse cannot place (composites: run decompose first).
Plan planFusion(const Graph& g);

// The group the in-place updates of the param op `param` belong to, from its role
// attributes (ir/roles.h), never its name: "layer <i>" for a param of block i (its
// optimizer state and weight copy have its layer), else the weight it belongs to: itself,
// or the weight its state or copy is `of`.
std::string updateGroupKey(const Op& param);

}  // namespace fusec::fusion
