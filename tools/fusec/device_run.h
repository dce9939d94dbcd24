// `fusec run` on the GPU: the program is compiled through the default optimisation pipeline
// and run by the runtime's Executable (runtime/executable.h), with the same bindings and the
// same outputs as the interpreter path. Kept out of cmd_run.cpp so the CLI builds without
// the CUDA toolkit.
#pragma once
#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "ir/host_tensor.h"

namespace fusec::cli {

struct DeviceRunOptions {
  bool cudaGraph = true;
  bool tf32 = false;
};

// True when this fusec was built with the GPU runtime and a CUDA device is present.
bool cudaDevicePresent();

// Throws Error("no CUDA device") unless cudaDevicePresent(): GPU commands call it before
// reading any file, so they fail fast and the same way everywhere.
void requireCudaDevice();

// Optimises `module` (its one function after the program passes) in place, runs it on the
// GPU once (forward) or `steps` times (train_step: `step` = 1..steps, in-place updates kept
// on the device), and returns the outputs of the last call with `env` updated: train_step
// writes each step's loss to `losses` and the final value of every param into `env`.
// Throws Error("no CUDA device") without a device or a CUDA build.
std::vector<HostTensor> runOnDevice(Module& module, Bindings& env, int64_t steps, std::vector<float>* losses,
                                    const DeviceRunOptions& opts);

}  // namespace fusec::cli
