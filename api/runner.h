// One planned function run call by call on a backend, its state kept between calls:
// in-place updates (`return %w.new -> "w"`) replace their param's value for the next call.
// Two backends: the CPU interpreter (ir/interpreter.h) and the GPU Executable
// (runtime/executable.h; only in a build with the CUDA toolkit). CompiledProgram runs on
// one; the eager comparisons of the tests take either.
#pragma once
#include <memory>
#include <string>

#include "api/compile.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"

namespace fusec::api {

class ProgramRunner {
 public:
  virtual ~ProgramRunner() = default;
  // Binds every value of `values` named like an input or param of the program; values are
  // consumed (moved from) so that a big model's state is not held twice.
  virtual void bind(Bindings&& values) = 0;
  virtual void run() = 0;
  // Output i of the last run, and the current value of a source (a param after updates).
  virtual HostTensor output(size_t i) = 0;
  virtual HostTensor read(const std::string& name) = 0;
};

// The CPU interpreter. `g` must outlive the runner.
std::unique_ptr<ProgramRunner> interpreterRunner(const Graph& g);

// The GPU Executable of `g` (which must outlive it), kernels through the default cubin cache,
// with o's cudaGraph, tf32, gemmAutotune and syncEachLaunch. Throws Error("no CUDA device")
// without a device or in a build without the CUDA toolkit.
std::unique_ptr<ProgramRunner> deviceRunner(const Graph& g, const CompileOptions& o);

// True when this build has the GPU runtime and a CUDA device is present.
bool cudaDevicePresent();
// Throws Error("no CUDA device ...") unless cudaDevicePresent().
void requireCudaDevice();

}  // namespace fusec::api
