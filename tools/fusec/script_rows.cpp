#include "tools/fusec/script_rows.h"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sys/wait.h>

#include "ir/graph.h"

namespace fusec::cli {

std::string shellQuoted(const std::string& s) {
  std::string quoted = "'";
  for (char c : s) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string selfExecutable() {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("fusec") : p.string();
}

std::vector<std::string> commandLines(const std::string& cmd, const std::string& what) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw Error(what + ": cannot start '" + cmd + "'");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = pclose(p);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 127) throw Error(what + ": cannot start '" + cmd + "' (not found)");
  if (status != 0) throw Error(what + " failed (exit " + std::to_string(code) + ")");
  std::vector<std::string> lines;
  size_t at = 0;
  while (at < out.size()) {
    size_t end = out.find('\n', at);
    if (end == std::string::npos) end = out.size();
    if (end > at) lines.push_back(out.substr(at, end - at));
    at = end + 1;
  }
  return lines;
}

std::vector<std::string> scriptRows(const std::string& script, const std::string& args) {
  const std::string cmd = "python3 " + shellQuoted(script) + " " + args;
  std::cerr << "running " << cmd << "\n";
  return commandLines(cmd, "--vs-torch: " + script);
}

}  // namespace fusec::cli
