#include "passes/fusion/domain.h"

#include <algorithm>

#include "ir/type_rules.h"

namespace fusec::fusion {

Domain reductionDomain(const Shape& in, const std::vector<int64_t>& axes) {
  std::vector<bool> reduced(in.size(), false);
  for (int64_t a : axes) reduced[size_t(normalizeAxis(a, int(in.size()), "reduction"))] = true;
  int64_t kept = 1, red = 1;
  std::vector<bool> pattern;  // reduced flags of the dims that are not 1
  for (size_t d = 0; d < in.size(); ++d) {
    (reduced[d] ? red : kept) *= in[d];
    if (in[d] != 1) pattern.push_back(reduced[d]);
  }
  bool anyReduced = false, allReduced = true;
  for (bool p : pattern) anyReduced |= p, allReduced &= p;
  if (!anyReduced) return {DomainKind::Pointwise, kept, 1};
  if (allReduced) return {DomainKind::All, 1, red};
  auto isSorted = [&](bool reducedFirst) {  // kept dims then reduced dims, or the reverse
    bool seenSecond = false;
    for (bool p : pattern) {
      bool second = reducedFirst ? !p : p;
      if (seenSecond && !second) return false;
      seenSecond |= second;
    }
    return true;
  };
  if (isSorted(/*reducedFirst=*/true)) return {DomainKind::Col, kept, red};
  // One reduced block between kept dims ([S, R, C] over R: split-reductions' partials) is
  // columns too: each outer index owns its own block of C-wide rows.
  size_t i = 0;
  while (i < pattern.size() && !pattern[i]) ++i;
  while (i < pattern.size() && pattern[i]) ++i;
  const bool middleBlock = i < pattern.size() && std::none_of(pattern.begin() + long(i), pattern.end(), [](bool p) { return p; });
  if (middleBlock) return {DomainKind::Col, kept, red};
  return {DomainKind::Row, kept, red};  // trailing axes, or strided rows
}

Domain domainOf(const Op& op) {
  switch (op.info().category) {
    case OpCategory::Reduction: return reductionDomain(op.operands[0]->type.shape, op.attrInts("axes"));
    default: break;
  }
  if (op.kind == OpKind::ScatterAdd) return {DomainKind::Scatter, op.operands[2]->type.numel(), 1};
  if (op.kind == OpKind::Attention || op.kind == OpKind::AttentionBackward)
    return {DomainKind::Attention, op.result()->type.numel(), 1};
  return {DomainKind::Pointwise, op.result()->type.numel(), 1};
}

namespace {

// A pointwise group of `points` elements can join a reduction group `red` as its prologue
// (one point per reduced element) or, for rows, as its epilogue (one point per row).
bool pointwiseFits(int64_t points, const Domain& red, bool asEpilogue) {
  if (red.kind == DomainKind::Row) return points == red.n * red.r || points == red.n;
  return !asEpilogue && points == red.n * red.r;
}

bool isReduction(DomainKind k) {
  return k != DomainKind::Pointwise && k != DomainKind::Multi && k != DomainKind::Attention;
}

}  // namespace

bool totalsRowsOf(const Domain& all, const Domain& row) {
  return all.kind == DomainKind::All && row.kind == DomainKind::Row && all.r == row.n;
}

bool sumsColumnsOf(const Domain& col, const Domain& row) {
  return col.kind == DomainKind::Col && row.kind == DomainKind::Row && col.n == row.r && col.r == row.n &&
         col.n <= kMaxColumnSumWidth;
}

std::optional<Domain> fuseDomains(const Domain& producer, const Domain& consumer, bool edge) {
  // Column sums join the row kernel over their elements: as a sibling, or reading its
  // per-element values (the row group is then the producer); never the other way round.
  if (sumsColumnsOf(consumer, producer) || (!edge && sumsColumnsOf(producer, consumer))) {
    Domain d = producer.kind == DomainKind::Row ? producer : consumer;
    if (d.rowTotals) return std::nullopt;
    d.columnSums = true;
    return d;
  }
  // A total of the rows' results joins the row group that computes them.
  if (edge && totalsRowsOf(consumer, producer) && !producer.columnSums) {
    Domain d = producer;
    d.rowTotals = true;
    return d;
  }
  if (producer.kind == DomainKind::Row && consumer.kind == DomainKind::Row && producer.n == consumer.n &&
      producer.r == consumer.r && (producer.columnSums || consumer.columnSums)) {
    if (producer.rowTotals || consumer.rowTotals) return std::nullopt;
    return Domain{DomainKind::Row, producer.n, producer.r, true};
  }
  for (DomainKind alone : {DomainKind::Multi, DomainKind::Attention})
    if (producer.kind == alone || consumer.kind == alone) return std::nullopt;
  const bool pp = producer.kind == DomainKind::Pointwise, cp = consumer.kind == DomainKind::Pointwise;
  if (pp && cp) return producer.n == consumer.n ? std::optional(producer) : std::nullopt;
  if (pp && isReduction(consumer.kind))
    return pointwiseFits(producer.n, consumer, /*asEpilogue=*/false) ? std::optional(consumer) : std::nullopt;
  if (cp && isReduction(producer.kind))
    return pointwiseFits(consumer.n, producer, /*asEpilogue=*/edge) ? std::optional(producer) : std::nullopt;
  // Two reductions over the same rows share registers; other kinds only as siblings.
  if (producer == consumer && (producer.kind == DomainKind::Row || (!edge && producer.kind != DomainKind::Scatter)))
    return producer;
  return std::nullopt;
}

}  // namespace fusec::fusion
