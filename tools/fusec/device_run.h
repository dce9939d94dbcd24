// `fusec run` on the GPU: the lowered program run by the compile API's device backend
// (api/runner.h: the runtime's Executable), with the same bindings and the same outputs as the
// interpreter path.
#pragma once
#include <cstdint>
#include <vector>

#include "api/compile.h"
#include "api/runner.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"

namespace fusec::cli {

using api::cudaDevicePresent;
using api::requireCudaDevice;

// Runs `module` (its one function, lowered for the GPU: api::lowerProgram with the default
// pipeline) on the GPU once (forward) or `steps` times (train_step: `step` = 1..steps, in-place
// updates kept on the device), and returns the outputs of the last call with `env` updated:
// train_step writes each step's loss to `losses` and the final value of every param into
// `env`. Throws Error("no CUDA device") without a device or a CUDA build.
std::vector<HostTensor> runOnDevice(Module& module, Bindings& env, int64_t steps, std::vector<float>* losses,
                                    const api::CompileOptions& o);

}  // namespace fusec::cli
