#include "planned_program.h"

#include "passes/pass_manager.h"
#include "passes/pipeline.h"

namespace fusec::test {

std::unique_ptr<Module> planProgram(const models::ModelConfig& cfg, const std::string& program, DType dtype,
                                    int64_t batch, int64_t seq, const models::AdamWConfig& adamw) {
  auto m = std::make_unique<Module>();
  if (program == "forward")
    models::buildForward(*m, cfg, batch, seq);
  else if (program == "train_step")
    models::buildTrainLoss(*m, cfg, batch, seq);  // the program passes make it the step
  else
    throw Error("planProgram: program '" + program + "' is neither forward nor train_step");
  // Verifying after every pass costs seconds on the big models and proves nothing new here
  // (the pass tests do that); the runtime rejects a graph it cannot run.
  PassManagerOptions opts;
  opts.verifyEach = false;
  PassManager pm(opts);
  for (auto& p : programPasses(program, dtype, adamw)) pm.add(std::move(p));
  pm.addPipeline(defaultOptimizationPipeline());
  pm.run(*m);
  return m;
}

namespace {

class InterpreterRunner final : public ProgramRunner {
 public:
  explicit InterpreterRunner(const Graph& g) : g_(g) {}

  void bind(Bindings&& values) override {
    for (auto& [name, t] : values)
      if (g_.findInput(name) || g_.findParam(name)) env_[name] = std::move(t);
    values.clear();
  }

  void run() override {
    outs_ = interpret(g_, env_);
    for (size_t i = 0; i < outs_.size(); ++i)
      if (const std::string& target = g_.updateOf(i); !target.empty()) env_[target] = outs_[i];
  }

  HostTensor output(size_t i) override {
    if (i >= outs_.size()) throw Error("interpreter runner: no output " + std::to_string(i) + " (run first)");
    return outs_[i];
  }

  HostTensor read(const std::string& name) override {
    auto it = env_.find(name);
    if (it == env_.end()) throw Error("interpreter runner: '" + name + "' was never bound");
    return it->second;
  }

 private:
  const Graph& g_;
  Bindings env_;
  std::vector<HostTensor> outs_;
};

}  // namespace

std::unique_ptr<ProgramRunner> interpreterRunner(const Graph& g) { return std::make_unique<InterpreterRunner>(g); }

}  // namespace fusec::test
