// Runs the fusec binary under test (test::fusecBinary()) as a user would, for the GPU tests of the
// CLI: its output and exit code.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>

#include "test_util.h"

namespace fusec::test {

// stdout (and stderr when `withStderr`) of `fusec <args>`, and its exit code (-1 when it did
// not exit normally).
inline std::pair<std::string, int> runFusec(const std::string& args, bool withStderr = true) {
  return runCommand(fusecBinary() + " " + args + (withStderr ? " 2>&1" : " 2>/dev/null"));
}

// Whether `fusec bench` has its eager worker (fusec-eager beside fusec, or $FUSEC_EAGER): a
// build of some targets only may lack it (it needs LibTorch). `why` says what is missing.
inline bool eagerWorkerBuilt(std::string* why) {
  const char* env = std::getenv("FUSEC_EAGER");
  const std::string worker = env && *env ? std::string(env)
                                         : (std::filesystem::path(fusecBinary()).parent_path() / "fusec-eager").string();
  if (::access(worker.c_str(), X_OK) == 0) return true;
  *why = worker + " is not built: the eager rows need it (cmake --build <build> --target fusec-eager)";
  return false;
}

}  // namespace fusec::test
