// Runs the fusec binary under test (FUSEC_BINARY) as a user would, for the GPU tests of the
// CLI: its output and exit code.
#pragma once
#include <string>
#include <utility>

#include "test_util.h"

namespace fusec::test {

// stdout (and stderr when `withStderr`) of `fusec <args>`, and its exit code (-1 when it did
// not exit normally).
inline std::pair<std::string, int> runFusec(const std::string& args, bool withStderr = true) {
  return runCommand(std::string(FUSEC_BINARY) + " " + args + (withStderr ? " 2>&1" : " 2>/dev/null"));
}

}  // namespace fusec::test
