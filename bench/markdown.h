// Markdown tables with columns padded to their widest cell, as the seed reports print them
// (`fusec profile`'s tables, the GEMM autotuning table).
#pragma once
#include <string>
#include <vector>

namespace fusec::bench {

// A header row, the rule, then one line per row; every row has the header's cell count.
std::string markdownTable(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows);

// snprintf of one number with format `f` ("%.3f"), as a string.
std::string formatNumber(const char* f, double x);

}  // namespace fusec::bench
