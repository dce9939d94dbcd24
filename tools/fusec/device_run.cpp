#include "tools/fusec/device_run.h"

#include <cstdlib>

#include "passes/pass_manager.h"
#include "passes/pipeline.h"
#ifdef FUSEC_HAVE_CUDA
#include "codegen/cubin_cache.h"
#include "runtime/device.h"
#include "runtime/executable.h"
#endif

namespace fusec::cli {

bool cudaDevicePresent() {
#ifdef FUSEC_HAVE_CUDA
  return rt::deviceAvailable();
#else
  return false;
#endif
}

void requireCudaDevice() {
#ifdef FUSEC_HAVE_CUDA
  rt::openDevice();
#else
  throw Error("no CUDA device (this fusec was built without the CUDA toolkit)");
#endif
}

std::vector<HostTensor> runOnDevice(Module& module, Bindings& env, int64_t steps, std::vector<float>* losses,
                                    const DeviceRunOptions& opts) {
#ifndef FUSEC_HAVE_CUDA
  (void)module, (void)env, (void)steps, (void)losses, (void)opts;
  throw Error("no CUDA device (this fusec was built without the CUDA toolkit)");
#else
  rt::openDevice();  // "no CUDA device" before any compile work
  PassManager pm;
  pm.addPipeline(defaultOptimizationPipeline());
  pm.run(module);
  const Graph& g = *module.funcs.at(0);
  codegen::CubinCache cache(codegen::CubinCache::defaultDir());
  rt::ExecutableOptions eo;
  eo.cudaGraph = opts.cudaGraph;
  eo.tf32 = opts.tf32;
  eo.cache = &cache;
  const char* sync = std::getenv("FUSEC_SYNC_LAUNCHES");
  eo.syncEachLaunch = sync && *sync && std::string(sync) != "0";
  if (eo.syncEachLaunch) eo.cudaGraph = false;
  rt::Executable exe(g, eo);
  exe.bind(env);
  std::vector<HostTensor> outs;
  bool train = false;  // a training step counts its calls in the `step` input
  for (Op* in : g.inputs()) train |= in->attrStr("name") == "step";
  for (int64_t step = 1; step <= steps; ++step) {
    if (train) {
      HostTensor t = HostTensor::zeros(Type{DType::f32, {}});
      t.f[0] = float(step);
      exe.bind("step", t);
    }
    exe.run();
    if (losses) losses->push_back(exe.output(0).f.at(0));
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) outs.push_back(exe.output(i));
  for (Op* p : g.params()) env[p->attrStr("name")] = exe.read(p->attrStr("name"));
  return outs;
#endif
}

}  // namespace fusec::cli
