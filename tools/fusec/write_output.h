// Where a command's report goes: stdout for "-", else the file (one-line error if it cannot
// be written).
#pragma once
#include <fstream>
#include <iostream>
#include <string>

#include "ir/graph.h"

namespace fusec::cli {

inline void writeOutput(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::cout << text;
    return;
  }
  std::ofstream f(path);
  if (!(f << text)) throw Error("cannot write '" + path + "'");
}

}  // namespace fusec::cli
