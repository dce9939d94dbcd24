// The one exception type of the project.
#pragma once
#include <stdexcept>
#include <string>

namespace fusec {

// Every user-facing failure (bad IR, bad shapes, bad flags) is an Error whose what() is one
// line. A located one reads "file:line:col: error: msg" (clang style); errorLine() gives the
// line to print for any of them.
struct Error : std::runtime_error {
  explicit Error(const std::string& msg, bool located = false) : std::runtime_error(msg), located(located) {}
  bool located;
};

}  // namespace fusec
