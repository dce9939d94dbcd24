// `--emit=ir|cuda|cubin --out-dir DIR`, shared by `fusec compile` and `fusec codegen`.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "ir/graph.h"

namespace fusec::cli {

struct EmitArgs {
  std::string emit = "ir", outDir;
};

void addEmitFlags(CLI::App& cmd, EmitArgs& a, const std::string& defaultEmit);
// Writes the kernels of `m` for --emit=cuda|kir|cubin (an Error without --out-dir) and returns
// true; returns false for --emit=ir, which the command prints itself.
bool emitKernels(const EmitArgs& a, const Module& m);

}  // namespace fusec::cli
