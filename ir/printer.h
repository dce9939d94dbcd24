// Prints a Module as .fir text. print(parse(print(m))) == print(m) exactly.
#pragma once
#include <ostream>
#include <string>

#include "ir/graph.h"

namespace fusec {

void print(const Module& m, std::ostream& os);
std::string printModule(const Module& m);
std::string printGraph(const Graph& g);  // one `func @name { ... }` block
std::string formatAttr(const AttrValue& v);
std::string formatFloat(double v);  // shortest text that parses back to the same double

}  // namespace fusec
