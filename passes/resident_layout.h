// The resident region: the storage of a function's `param` and `input` values, which persist
// across calls (weights, optimizer state, the step's inputs) and so live outside the arena.
// Its one layout rule: a resident concat (a `concat` along axis 0 of whole params, which
// fuse leaves at top level for merged GEMM weights such as Wq|Wk|Wv) is a view, so its
// operands must sit back to back in operand order. Each chain of such params is packed with
// no padding (the bytes must be contiguous); every chain (a lone param is a chain of one)
// starts on a 256-byte boundary.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <unordered_set>

#include "ir/graph.h"
#include "support/ptr_hash.h"

namespace fusec {

struct ResidentLayout {
  PtrMap<const Value*, int64_t> offset;  // every input and param result, in bytes
  PtrSet<const Op*> concats;             // the concats that are views of the region
  int64_t bytes = 0;                                 // region size, a multiple of 256
};

// A concat the structure allows to be resident: axis 0, every operand a `param` result.
bool isResidentConcatCandidate(const Op& op);

// Accepts candidate concats in op order while their adjacency demands stay consistent (each
// param has at most one successor and one predecessor, no cycles); a candidate that
// conflicts with earlier ones (say concat(A, B) and concat(A, C)) is not resident: it owns
// arena storage and the runtime copies into it.
ResidentLayout layoutResident(const Graph& g);

}  // namespace fusec
