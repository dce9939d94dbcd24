// Where a command's report goes: stdout for "-", else the file, written atomically (one-line
// error if it cannot be written).
#pragma once
#include <iostream>
#include <string>

#include "ir/graph.h"
#include "support/atomic_file.h"

namespace fusec::cli {

inline void writeOutput(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::cout << text;
    return;
  }
  writeFileAtomically(path, text);
}

}  // namespace fusec::cli
