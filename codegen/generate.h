// CUDA source generation for the fused kernels of a planned module (after `fuse`): one
// GeneratedKernel per top-level `kernel` op, following codegen/kernel_abi.h.
#pragma once
#include <vector>

#include "codegen/kernel_abi.h"
#include "codegen/target.h"
#include "ir/graph.h"

namespace fusec::codegen {

// The kernel for `kernel` (a `kernel` op of `enclosing`, which says which results update
// params in place). Throws a one-line Error for a body codegen cannot handle. With
// `kernelIr`, GeneratedKernel::kernelIr holds the dump of its statements (`--emit kir`); the
// runtime does not ask for it.
GeneratedKernel generateKernel(const Op& kernel, const Graph& enclosing, const Target& target = {},
                               bool kernelIr = false);

// Every top-level kernel of every function, in program order, each identical source (modulo
// the kernel name) generated once: later copies point at the first (GeneratedKernel::image).
std::vector<GeneratedKernel> generateModule(const Module& m, const Target& target = {}, bool kernelIr = false);

// The same for one function (what the runtime loads).
std::vector<GeneratedKernel> generateFunction(const Graph& g, const Target& target = {});

}  // namespace fusec::codegen
