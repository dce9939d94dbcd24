// Where a command's report goes: stdout for "-", else the file, written atomically (one-line
// error if it cannot be written).
#pragma once
#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>

#include "ir/graph.h"
#include "support/atomic_file.h"

namespace fusec::cli {

inline void writeOutput(const std::string& path, const std::string& text) {
  if (path == "-") {
    // A full disk or a closed pipe must not pass for success: the output is the command's work.
    std::cout << text << std::flush;
    if (!std::cout) throw Error(std::string("cannot write the output to stdout: ") + std::strerror(errno));
    return;
  }
  writeFileAtomically(path, text);
}

}  // namespace fusec::cli
