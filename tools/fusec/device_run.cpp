#include "tools/fusec/device_run.h"

#include "ir/roles.h"

namespace fusec::cli {

std::vector<HostTensor> runOnDevice(Module& module, Bindings& env, int64_t steps, std::vector<float>* losses,
                                    const api::CompileOptions& o) {
  const Graph& g = *module.funcs.at(0);
  std::unique_ptr<api::ProgramRunner> r = api::deviceRunner(g, o);
  // A training step counts its calls in its step-counter input.
  const Op* counter = findInputByRole(g, Role::StepCount);
  std::vector<std::string> params;
  for (Op* p : g.params()) params.push_back(p->attrStr("name"));
  r->bind(std::move(env));
  for (int64_t step = 1; step <= steps; ++step) {
    if (counter) {
      Bindings s;
      HostTensor& t = s[counter->attrStr("name")] = HostTensor::zeros(Type{DType::f32, {}});
      t.f[0] = float(step);
      r->bind(std::move(s));
    }
    r->run();
    if (losses) losses->push_back(r->output(0).f.at(0));
  }
  std::vector<HostTensor> outs;
  for (size_t i = 0; i < g.outputs.size(); ++i) outs.push_back(r->output(i));
  env.clear();
  for (const std::string& name : params) env[name] = r->read(name);
  return outs;
}

}  // namespace fusec::cli
