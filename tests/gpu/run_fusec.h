// Runs the fusec binary under test (FUSEC_BINARY) as a user would, for the GPU tests of the
// CLI: its output and exit code.
#pragma once
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>
#include <utility>

namespace fusec::test {

// stdout (and stderr when `withStderr`) of `fusec <args>`, and its exit code (-1 when it did
// not exit normally).
inline std::pair<std::string, int> runFusec(const std::string& args, bool withStderr = true) {
  FILE* p = popen((std::string(FUSEC_BINARY) + " " + args + (withStderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  if (!p) return {"<popen failed>", -1};
  std::string out;
  std::array<char, 4096> buf;
  while (fgets(buf.data(), int(buf.size()), p)) out += buf.data();
  const int status = pclose(p);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

}  // namespace fusec::test
