// Operand checking and result-type inference for every op, keyed by OpInfo::rule.
#pragma once
#include <vector>

#include "ir/graph.h"

namespace fusec {

// Checks an op's operand types and attributes and returns its result types.
// `declared` holds the result types written in text or given to the builder: rules whose
// result cannot be inferred (sources, reshape, broadcast, cast, kernel) take them from there
// and check them; for every other rule `declared` may be empty. `body` is the kernel body.
// Throws Error with a one-line message (no location: callers add it).
std::vector<Type> inferResultTypes(const OpInfo& info, const std::vector<Type>& operands,
                                   const std::vector<AttrValue>& attrs,
                                   const std::vector<Type>& declared, const Graph* body);

// inferResultTypes, then: if `declared` is non-empty it must equal the inferred types, else
// Error("result type X does not match the inferred Y"). Returns the result types.
std::vector<Type> checkResultTypes(const OpInfo& info, const std::vector<Type>& operands,
                                   const std::vector<AttrValue>& attrs, const std::vector<Type>& declared,
                                   const Graph* body);
// The same into `inferred`, whose capacity is reused (for a caller that checks many ops);
// `inferred` must not be `declared` (the check would compare the vector with itself).
void checkResultTypes(const OpInfo& info, const std::vector<Type>& operands, const std::vector<AttrValue>& attrs,
                      const std::vector<Type>& declared, const Graph* body, std::vector<Type>& inferred);

// How many results an op of `info` with `operands` operands has (a kernel's: as many as its
// body returns; reported 1). Every op has one except attention (o, lse), attention_backward
// (dq, dk, dv), all_reduce and reduce_scatter (one per operand).
size_t resultCount(const OpInfo& info, size_t operands);

// Grouped-query attention's group (ops.def): the query heads that read one key/value head, q's
// heads (its last batch dim) over k's; 1 when they are equal or there are no heads.
int64_t attentionGroup(const Type& q, const Type& k);

// Normalises a possibly negative axis against `rank`; throws Error if out of range.
int normalizeAxis(int64_t axis, int rank, const char* what);

}  // namespace fusec
