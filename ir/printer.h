// Prints a Module as .fir text. print(parse(print(m))) == print(m) exactly.
#pragma once
#include <ostream>
#include <string>
#include <unordered_map>

#include "ir/graph.h"
#include "support/ptr_hash.h"

namespace fusec {

void print(const Module& m, std::ostream& os);
std::string printModule(const Module& m);
std::string printGraph(const Graph& g);  // one `func @name { ... }` block
std::string formatAttr(const AttrValue& v);
std::string formatFloat(double v);
// The names the printer gives the top-level values of a function: "%name", or "%N" for the
// N-th unnamed one (for tools that point at values as the printed IR shows them).
PtrMap<const Value*, std::string> valueNames(const Graph& g);  // shortest text that parses back to the same double

}  // namespace fusec
