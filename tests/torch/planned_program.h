// A model program as fusec compiles it (`fusec compile`): traced, its program passes run
// (autocast for bf16, autodiff + adamw for train_step, ...) and then the default optimisation
// pipeline, down to kernels over a memory plan; and a ProgramRunner, which runs such a
// program step by step on some backend (the CPU interpreter here, the GPU Executable in
// gpu/executable_runner.h), so that one comparison harness serves both.
#pragma once
#include <memory>
#include <string>

#include "frontend/models/transformer.h"
#include "ir/graph.h"
#include "ir/interpreter.h"

namespace fusec::test {

// `program` is "forward" or "train_step"; `dtype` f32 or bf16. The module's only function
// is the planned program.
std::unique_ptr<Module> planProgram(const models::ModelConfig& cfg, const std::string& program, DType dtype,
                                    int64_t batch, int64_t seq, const models::AdamWConfig& adamw = {});

// One planned function, run call by call with its state kept between calls: in-place updates
// (`return %w.new -> "w"`) replace their param's value for the next call.
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

// The CPU interpreter as a backend (`fusec run --device cpu` does the same).
std::unique_ptr<ProgramRunner> interpreterRunner(const Graph& g);

}  // namespace fusec::test
