// Iteration domains of fusable ops (Inductor style): an op iterates over n output points,
// each reducing r elements (r = 1 for pointwise work). Two groups fuse when their domains
// agree: that, not a list of patterns, decides which ops share a kernel.
#pragma once
#include <cstdint>
#include <optional>

#include "ir/graph.h"

namespace fusec::fusion {

enum class DomainKind {
  Pointwise,  // n points, r = 1
  Row,        // n rows of r contiguous (or index-mapped) elements: the row stays in registers
  Col,        // n columns, each summed over r leading elements
  All,        // one scalar from r elements
  Scatter,    // n source elements scattered into a table
  Multi,      // several independent shapes (AdamW of one layer): never fused further
  Attention,  // one attention / attention_backward composite: a flash kernel of its own
};

struct Domain {
  DomainKind kind = DomainKind::Pointwise;
  int64_t n = 1, r = 1;
  // A Row group that also sums its elements down the rows: column reductions over the same
  // n x r elements (the norm-weight gradient beside the rmsnorm backward, as Apex and Liger
  // fuse it). Their results exist only after every block finished, like a Col group's.
  bool columnSums = false;
  // A Row group that also reduces its rows' results to one value: an All reduction of exactly
  // its n row values (the mean of cross-entropy's per-row losses, the loss). Like column sums,
  // that value exists only after every block finished. Never together with columnSums.
  bool rowTotals = false;
  bool operator==(const Domain&) const = default;
};

// The widest row whose column sums a row kernel keeps: codegen holds a thread's columns in
// registers (at most 32 of a 512-thread block's row).
constexpr int64_t kMaxColumnSumWidth = 16384;

// The most source positions (tokens) of a scatter_add that takes its table's consumers as an
// epilogue (fusion/plan.cpp): codegen lists every position of a block's rows in shared memory
// and sorts the list by row (codegen/scatter_kernel.cpp `csr`, also used without an epilogue
// up to this size), so a row's sum is complete in one round and never carried through memory
// (6 bytes a position: 96 KiB).
constexpr int64_t kMaxScatterEpilogueSources = 16384;

// True when the All reduction `all` reduces exactly one value per row of the row domain `row`
// (all.r == row.n), so a row kernel can add each row's value as it finishes the row.
bool totalsRowsOf(const Domain& all, const Domain& row);

// True when the column reduction `col` sums exactly the elements of the row domain `row`
// down its rows (col.n == row.r columns of col.r == row.n rows), so a row kernel can add
// each element it already holds into its column.
bool sumsColumnsOf(const Domain& col, const Domain& row);

// How a reduction of `in` over `axes` iterates (size-1 dims ignored): over the trailing dims
// a Row, over the leading dims (or one block of dims with kept dims after it) a Col, over
// all an All; other axis sets are Rows whose elements are gathered by index math. Reducing
// only size-1 dims is Pointwise.
Domain reductionDomain(const Shape& in, const std::vector<int64_t>& axes);

// The domain of a non-GEMM compute op.
Domain domainOf(const Op& op);

// The domain of the group made of a producer group and a consumer group (edge = true), or
// of two groups that only share an input (edge = false); nullopt when they cannot share a
// kernel. Col, All and Scatter groups take pointwise producers but never consumers: their
// result exists only after every block finished. A Row group and a Col group over the same
// elements (sumsColumnsOf) share a kernel as siblings, or with the Row group as producer;
// the merged Row group has columnSums, and which of its values a consumer may read is the
// planner's check (fusion/plan.cpp), not the domains'. An All group reading one value per row
// of a Row group (totalsRowsOf) joins it as its consumer: the merged Row group has rowTotals.
std::optional<Domain> fuseDomains(const Domain& producer, const Domain& consumer, bool edge);

}  // namespace fusec::fusion
