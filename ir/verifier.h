// Structural and type verification of a Module: SSA (defined before use, within the same
// graph), arity, attributes, result types, unique names, kernel bodies.
#pragma once
#include "ir/graph.h"

namespace fusec {

// Throws Error("file:line:col: error: ...") (or a location-free message for ops built in
// memory) describing the first problem found.
void verify(const Module& m);
void verifyGraph(const Graph& g, const std::string& sourceName = "<input>");

// What the verifier does with kernel bodies. Verify: each body is walked like a graph. Trust:
// each kernel op is still checked against its body (operands, result types), but the body's own
// ops are not walked: for the pass manager after a pass that declares it leaves bodies alone
// (Pass::leavesKernelBodies), since the last walk of them. After fusion, bodies hold most of
// a program's ops (eight in nine at 1,000 layers), and walking them again after each late pass
// cost more than those passes. Debug builds walk them anyway, so a pass that declares wrongly
// fails CI's sanitizer run.
enum class KernelBodies { Verify, Trust };
void verify(const Module& m, KernelBodies bodies);

}  // namespace fusec
