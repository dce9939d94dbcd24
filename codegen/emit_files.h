// `--emit=cuda|cubin --out-dir DIR`: the generated kernels as files for the runtime (and
// for people): DIR/<image>.cu or DIR/<image>.cubin per distinct kernel source, and
// DIR/kernels.json with each kernel's image, family, launches and parameter types
// (kernel_abi.h).
#pragma once
#include <string>
#include <vector>

#include "codegen/kernel_abi.h"

namespace fusec::codegen {

enum class Emit { Cuda, Cubin, KernelIr };

// Throws Error when DIR cannot be written or a kernel does not compile. Cubins are built for
// `arch` (the target the kernels were generated for: Target::arch()).
void writeKernelFiles(const std::vector<GeneratedKernel>& kernels, Emit emit, const std::string& dir,
                      const std::string& arch);

std::string kernelsJson(const std::vector<GeneratedKernel>& kernels);

}  // namespace fusec::codegen
