// The `--vs-torch` side of `fusec bench` and `fusec bench attention`: runs a reference script
// (bench/torch_compile_ref.py, bench/torch_sdpa_ref.py) under python3 and returns its stdout's
// non-empty lines, the JSON rows the caller parses. Its stderr passes through (progress, the
// reason of an unsupported row).
#pragma once
#include <string>
#include <vector>

namespace fusec::cli {

// Runs `cmd` under the shell and returns its stdout's non-empty lines (stderr passes
// through). Throws Error, prefixed with `what`, when it cannot start or exits non-zero.
std::vector<std::string> commandLines(const std::string& cmd, const std::string& what);

// Throws Error when python3 cannot start or the script exits non-zero.
std::vector<std::string> scriptRows(const std::string& script, const std::string& args);

// `s` single-quoted for the shell.
std::string shellQuoted(const std::string& s);
// The path of the running fusec binary (the reference scripts ask it for the model sizes).
std::string selfExecutable();

}  // namespace fusec::cli
