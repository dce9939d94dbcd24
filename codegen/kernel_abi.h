// The kernel ABI: the contract between codegen (this directory) and the runtime that loads
// and launches the cubins. Everything the runtime needs to launch a kernel is in
// GeneratedKernel; it never has to look inside the source.
//
// * One `extern "C" __global__` function per launch, named by the kernel's `name` attribute
//   sanitised to a C identifier (sanitizeKernelName). Every family is one launch except the
//   attention backward (dq, then dk and dv: codegen/attention_kernel.cpp); a kernel of several
//   is launched in the order of `launches` on one stream.
// * Parameters, identical for every launch of a kernel: one pointer per kernel operand, in
//   operand order (`const T* __restrict__`), then one pointer per kernel result, in result
//   order (`T* __restrict__`). Scalars (AdamW's `step`) are f32[] tensors, so pointers too;
//   there are no by-value parameters. Each pointer addresses the tensor's dense row-major
//   storage (kernel operands are never strided views after `fuse`, see docs/pipeline.md).
// * Element types (storage): f32 -> float, bf16 -> __nv_bfloat16 (cuda_bf16.h), f16 -> __half
//   (cuda_fp16.h), i64 -> long long, i32 -> int, bool -> bool (one byte, 0 or 1, as the
//   interpreter's bool tensors). Arithmetic on bf16/f16 runs in f32: load -> float, compute
//   the whole fused body in f32, and round to the dtype (nearest-even) where a value is
//   stored and where the program casts. Intermediates are not rounded op by op as the
//   interpreter does: like eager PyTorch's own bf16 kernels (silu_backward, softmax) and
//   Inductor's, a fused chain is one f32 computation. Rounding each op cost one conversion
//   per op per element, which made long bf16 chains (SwiGLU's backward) compute-bound, and
//   only lost accuracy. bf16/f16 results may also use the hardware approximations of exp,
//   division and rsqrt (codegen/scalar_ops.h). Kernels therefore match the interpreter
//   within bf16 tolerance (tests/gpu/kernel_test.cpp), not bit for bit.
// * In-place updates: a result that overwrites a param (`return %w.new -> "w"`) may be
//   given the same pointer as the operand that reads that param. Codegen drops __restrict__
//   from both pointers of such a pair (GeneratedKernel::aliases), and every generated
//   family reads an aliased element only in the thread that writes it, before writing it.
// * Module-scope state: a kernel may keep data in `__device__` arrays of its source. The
//   flash backward passes its row statistics from one launch to the next; a row kernel with
//   column sums or a total of its rows keeps each block's partial and counters of finished
//   blocks, which its last block resets (codegen/reduce_kernels.cpp). That relies on the runtime's order: the
//   launches of a module's kernels run one after another on one stream, never two at once,
//   and each loaded module (KernelModule) has its own copy of the arrays, so executables
//   never share them.
// * Dependent launch: a Launch marked `dependent` waits, before it reads or writes anything,
//   for the grid before it in the stream to finish (griddepcontrol.wait), so the runtime may
//   launch it with programmatic stream serialization; its body still never overlaps another
//   kernel's, which the module-scope state above relies on.
// * All shapes are static: they are baked into the source, so a kernel is launched with
//   exactly the grid/block/shared memory of its Launch entries, no other.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ir/types.h"
#include "passes/fusion/kernel_family.h"

namespace fusec::codegen {

struct Launch {
  std::string function;                  // the extern "C" symbol
  std::array<uint32_t, 3> grid{1, 1, 1};
  std::array<uint32_t, 3> block{1, 1, 1};
  uint32_t dynamicSmem = 0;              // bytes
  // The function begins with griddepcontrol.wait (codegen::Target::dependentLaunch): the
  // runtime may launch it as a programmatic dependent of the kernel before it in the stream.
  bool dependent = false;
};

struct GeneratedKernel {
  std::string name;                      // sanitised kernel name (also the main symbol)
  KernelFamily family = KernelFamily::Pointwise;
  std::string source;                    // one self-contained CUDA C++ translation unit
  // The kernel IR the schedule built (codegen/kernel_ir.h): its functions' statements, which
  // `source` prints after the preamble and the helpers.
  std::string kernelIr;
  // Kernels that differ only by name (the layers' copies) share one source and cubin:
  // `image` names the kernel whose cubin holds this one's functions (its own name when it
  // is the first of its kind), and `launches[].function` are symbols of that image.
  std::string image;
  std::vector<Launch> launches;          // in launch order
  std::vector<Type> operands, results;   // the pointer parameters, in order
  // (operand index, result index) pairs that may share storage (in-place updates).
  std::vector<std::pair<int, int>> aliases;
};

// The kernel name as a C identifier: [A-Za-z0-9_], not starting with a digit.
std::string sanitizeKernelName(const std::string& name);

}  // namespace fusec::codegen
