// Layout ops as strided views. A chain of reshape/permute/slice/broadcast over some value
// `base` reads base's contiguous storage at offset + sum(index[i] * strides[i]): no copy is
// needed when the consumer can take strides (a GEMM, a kernel's index arithmetic, the memory
// plan's aliasing). One analysis that gemm-layout, fuse, memory-plan and the runtime share,
// so they never disagree about what is a view.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "ir/graph.h"

namespace fusec {

struct StridedView {
  const Value* base = nullptr;  // the first value below the chain that is not a view op
  int64_t offset = 0;           // in elements of base
  std::vector<int64_t> strides; // in elements, one per dim of the viewed value
};

// reshape, permute, slice and broadcast: ops that never need to move data by themselves.
bool isViewOp(OpKind k);

// True when permuting dims of `in` by `perm` (entries may count from the end) keeps the order
// of the dims that are not size 1: the data order is unchanged, a reshape in effect.
bool keepsDimOrder(const Shape& in, const std::vector<int64_t>& perm);

// Row-major strides of `s`.
std::vector<int64_t> contiguousStrides(const Shape& s);

// Strides of `to` over the same elements as `from` laid out with `strides`, if a view can
// express them (PyTorch's view() rule); nullopt when some chunk of `from` does not chain.
std::optional<std::vector<int64_t>> reshapeStrides(const Shape& from, const std::vector<int64_t>& strides,
                                                   const Shape& to);

// The view `v` is of the storage of its base. A value not defined by a view op is its own
// base with contiguous strides. nullopt when some reshape in the chain merges dims whose
// strides do not chain (a reshape of a transposed view): that value needs a copy.
std::optional<StridedView> resolveView(const Value* v);

// True when the view reads a dense row-major block (size-1 dims ignored).
bool isContiguousView(const StridedView& view, const Shape& shape);

// A GEMM reads an operand of logical shape [batch..., rows, cols] in place when one of the
// two matrix dims has unit stride and the other a leading dimension that covers it (a row-
// or column-major matrix); batch dims may have any strides (stride 0 included).
bool gemmReadable(const StridedView& view, const Shape& shape);

// When the batch dims of a GEMM-readable view step by one stride (so cuBLASLt's strided
// batch applies), that stride; nullopt when they need a pointer array. Rank-2 views: 0.
std::optional<int64_t> uniformBatchStride(const StridedView& view, const Shape& shape);

}  // namespace fusec
