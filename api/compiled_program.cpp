#include "api/compiled_program.h"

#include <algorithm>

#include "ir/step_inputs.h"
#include "passes/memory_plan.h"

namespace fusec::api {

CompiledProgram::CompiledProgram(std::unique_ptr<Model> model, Program program, CompileOptions options,
                                 std::unique_ptr<Module> module, std::vector<PassTiming> timings)
    : model_(std::move(model)),
      program_(std::move(program)),
      options_(std::move(options)),
      module_(std::move(module)),
      timings_(std::move(timings)) {
  // The device backend compiles and loads now: compile() returns a program ready to run, and
  // its errors (no device, out of memory) are compile's.
  if (options_.device == Device::Cuda) runner_ = deviceRunner(graph(), options_);
}

CompiledProgram::CompiledProgram(CompiledProgram&&) noexcept = default;
CompiledProgram& CompiledProgram::operator=(CompiledProgram&&) noexcept = default;
CompiledProgram::~CompiledProgram() = default;

ProgramRunner& CompiledProgram::runner() {
  if (!runner_) runner_ = interpreterRunner(graph());
  return *runner_;
}

ProgramStats CompiledProgram::stats() const {
  ProgramStats s;
  s.launches = launchStats(*module_);
  for (const PassTiming& t : timings_) s.passMs += t.ms;
  const MemoryPlanStats mem = planMemoryStats(graph());
  s.arenaBytes = mem.plannedBytes;
  s.residentBytes = mem.residentBytes;
  return s;
}

void CompiledProgram::bind(Bindings values) { runner().bind(std::move(values)); }

std::vector<HostTensor> CompiledProgram::step(Bindings inputs) {
  model_->validateInputs(program_, inputs);
  for (auto& [name, t] : stepInputs(graph(), steps_ + 1, options_.dropoutSeed)) inputs[name] = std::move(t);
  ProgramRunner& r = runner();
  r.bind(std::move(inputs));
  r.run();
  ++steps_;
  std::vector<HostTensor> outs;
  for (size_t i = 0; i < graph().outputs.size(); ++i)
    if (graph().updateOf(i).empty()) outs.push_back(r.output(i));
  return outs;
}

void CompiledProgram::resumeAt(int64_t steps) {
  if (steps_ != 0) throw Error("internal: resumeAt(" + std::to_string(steps) + ") after " + std::to_string(steps_) + " steps");
  if (steps < 0) throw Error("internal: resumeAt(" + std::to_string(steps) + ")");
  steps_ = steps;
}

HostTensor CompiledProgram::read(const std::string& name) { return runner().read(name); }

CompiledProgram compile(const Model& model, const Program& p, const CompileOptions& o) {
  const auto names = model.programs();
  if (std::find(names.begin(), names.end(), p.name) == names.end()) {
    std::string known;
    for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
    throw Error("model '" + model.name() + "' has no program '" + p.name + "' (it has: " + known + ")");
  }
  if (p.batch <= 0 || p.seq <= 0)
    throw Error("batch and sequence length must be at least 1, got " + std::to_string(p.batch) + " and " +
                std::to_string(p.seq));
  if (o.device == Device::Cuda) requireCudaDevice();  // before any compile work
  auto m = std::make_unique<Module>();
  m->sourceName = "<" + model.name() + ":" + p.name + ">";
  model.trace(*m, p, o);
  std::vector<PassTiming> timings = lowerProgram(*m, p.name, o);
  return CompiledProgram(model.clone(), p, o, std::move(m), std::move(timings));
}

}  // namespace fusec::api
