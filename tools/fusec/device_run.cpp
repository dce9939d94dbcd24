#include "tools/fusec/device_run.h"

namespace fusec::cli {

std::vector<HostTensor> runOnDevice(Module& module, Bindings& env, int64_t steps, std::vector<float>* losses,
                                    const api::CompileOptions& o) {
  const Graph& g = *module.funcs.at(0);
  std::unique_ptr<api::ProgramRunner> r = api::deviceRunner(g, o);
  bool train = false;  // a training step counts its calls in the `step` input
  for (Op* in : g.inputs()) train |= in->attrStr("name") == "step";
  std::vector<std::string> params;
  for (Op* p : g.params()) params.push_back(p->attrStr("name"));
  r->bind(std::move(env));
  for (int64_t step = 1; step <= steps; ++step) {
    if (train) {
      Bindings s;
      s["step"] = HostTensor::zeros(Type{DType::f32, {}});
      s["step"].f[0] = float(step);
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
