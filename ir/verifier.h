// Structural and type verification of a Module: SSA (defined before use, within the same
// graph), arity, attributes, result types, unique names, kernel bodies.
#pragma once
#include "ir/graph.h"

namespace fusec {

// Throws Error("file:line:col: error: ...") (or a location-free message for ops built in
// memory) describing the first problem found.
void verify(const Module& m);
void verifyGraph(const Graph& g, const std::string& sourceName = "<input>");

}  // namespace fusec
