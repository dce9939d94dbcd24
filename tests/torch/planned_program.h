// A model program as fusec compiles it (`fusec compile`): traced, its program passes run
// (autocast for bf16, autodiff + adamw for train_step, ...) and then the default optimisation
// pipeline, down to kernels over a memory plan (api::lowerProgram). The comparison harness
// runs it on either of the compile API's backends (api/runner.h).
#pragma once
#include <memory>
#include <string>

#include "api/runner.h"
#include "frontend/models/transformer.h"
#include "ir/graph.h"
#include "ir/interpreter.h"

namespace fusec::test {

// `program` is "forward" or "train_step"; `dtype` f32 or bf16. The module's only function
// is the planned program.
std::unique_ptr<Module> planProgram(const models::ModelConfig& cfg, const std::string& program, DType dtype,
                                    int64_t batch, int64_t seq, const models::AdamWConfig& adamw = {});

// The runners (the CPU interpreter, the GPU Executable) are the compile API's backends.
using api::interpreterRunner;
using api::ProgramRunner;

}  // namespace fusec::test
