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
  bool operator==(const Domain&) const = default;
};

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
// result exists only after every block finished.
std::optional<Domain> fuseDomains(const Domain& producer, const Domain& consumer, bool edge);

}  // namespace fusec::fusion
