#include "bench/markdown.h"

#include <algorithm>
#include <cstdio>

namespace fusec::bench {

std::string markdownTable(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w(head.size());
  for (size_t c = 0; c < head.size(); ++c) {
    w[c] = head[c].size();
    for (const auto& r : rows) w[c] = std::max(w[c], r[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s = "|";
    for (size_t c = 0; c < cells.size(); ++c) s += " " + cells[c] + std::string(w[c] - cells[c].size(), ' ') + " |";
    return s + "\n";
  };
  std::string s = line(head);
  std::vector<std::string> rule;
  for (size_t c = 0; c < w.size(); ++c) rule.push_back(std::string(w[c], '-'));
  s += line(rule);
  for (const auto& r : rows) s += line(r);
  return s;
}

std::string formatNumber(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

}  // namespace fusec::bench
