// compile(): a Model's program traced, lowered (lowerProgram) and loaded on its device, as
// an object to bind weights to and step.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "api/compile.h"
#include "api/model.h"
#include "api/runner.h"
#include "passes/launch_stats.h"

namespace fusec::api {

// What compile produced, for reports (`fusec compile --stats` prints more).
struct ProgramStats {
  LaunchStats launches;          // GEMMs and kernels, per layer
  int64_t arenaBytes = 0;        // scratch of one call (the memory plan's arena)
  int64_t residentBytes = 0;     // params and inputs (weights, AdamW state, bf16 copies)
  double passMs = 0;             // wall time of the passes
};

class CompiledProgram {
 public:
  CompiledProgram(std::unique_ptr<Model> model, Program program, CompileOptions options, std::unique_ptr<Module> module,
                  std::vector<PassTiming> timings);
  CompiledProgram(CompiledProgram&&) noexcept;
  CompiledProgram& operator=(CompiledProgram&&) noexcept;
  ~CompiledProgram();

  const Program& program() const { return program_; }
  const CompileOptions& options() const { return options_; }
  const Module& module() const { return *module_; }
  const Graph& graph() const { return *module_->funcs.at(0); }
  const std::vector<PassTiming>& passTimings() const { return timings_; }
  ProgramStats stats() const;

  // Binds params (weights, and the AdamW state and bf16 copies where the program has them:
  // frontend/program_state.h fills those) and any input by name; values are consumed. Names
  // that are not sources of the program are ignored.
  void bind(Bindings values);
  // One call: validates and binds `inputs` (Model::validateInputs), and the per-step inputs
  // the program has (ir/step_inputs.h: AdamW's step counter, the dropout key) for step
  // stepsRun() + 1; runs; returns the program's results
  // in order: its outputs that are not in-place updates of a param (forward: the logits;
  // train_step: the loss; fwd_bwd: the loss and every gradient). The updated params stay
  // where they are (on the device): read() copies one out.
  std::vector<HostTensor> step(Bindings inputs);
  // The current value of a source: a param after the updates of the steps run so far.
  HostTensor read(const std::string& name);
  int64_t stepsRun() const { return steps_; }
  // Continues a run whose first `steps` steps were run elsewhere (a resumed checkpoint): the
  // next step() is step `steps` + 1, which AdamW's bias correction reads. Error once this
  // program has run a step.
  void resumeAt(int64_t steps);

 private:
  ProgramRunner& runner();

  std::unique_ptr<Model> model_;
  Program program_;
  CompileOptions options_;
  std::unique_ptr<Module> module_;
  std::vector<PassTiming> timings_;
  std::unique_ptr<ProgramRunner> runner_;
  int64_t steps_ = 0;
};

// Traces `p` of `model`, lowers it with `o` (lowerProgram) and, on Device::Cuda, compiles and
// loads its kernels. Throws Error: an unknown program, a shape the model rejects, a pass
// error, "no CUDA device", out of GPU memory.
CompiledProgram compile(const Model& model, const Program& p, const CompileOptions& o = {});

}  // namespace fusec::api
