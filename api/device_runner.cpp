// The GPU backend. Built in every configuration: without the CUDA toolkit it only says so,
// so that the library and the CLI build (and run their CPU paths) on any machine.
#include <cstdlib>

#include "api/runner.h"
#ifdef FUSEC_HAVE_CUDA
#include "codegen/cubin_cache.h"
#include "runtime/device.h"
#include "runtime/executable.h"
#include "support/env.h"
#endif

namespace fusec::api {

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

#ifdef FUSEC_HAVE_CUDA
namespace {

class DeviceRunner final : public ProgramRunner {
 public:
  DeviceRunner(const Graph& g, const CompileOptions& o)
      : cache_(codegen::CubinCache::defaultDir()), exe_(g, options(cache_, o)) {}

  void bind(Bindings&& values) override {
    exe_.bind(values);
    values.clear();  // the host copies are on the device now: a big model's state is not held twice
  }
  void run() override { exe_.run(); }
  HostTensor output(size_t i) override { return exe_.output(i); }
  HostTensor read(const std::string& name) override { return exe_.read(name); }

 private:
  static rt::ExecutableOptions options(const codegen::CubinCache& cache, const CompileOptions& o) {
    rt::ExecutableOptions e;
    e.cache = &cache;
    e.cudaGraph = o.cudaGraph;
    e.communicator = o.communicator;
    e.tf32 = o.tf32;
    e.gemmAutotune = o.gemmAutotune;
    // FUSEC_SYNC_LAUNCHES=1 in the environment does the same (a fault named by its launch).
    e.syncEachLaunch = o.syncEachLaunch || envSwitch("FUSEC_SYNC_LAUNCHES", false);
    if (e.syncEachLaunch) e.cudaGraph = false;
    return e;
  }

  codegen::CubinCache cache_;  // before exe_: it is used while exe_ is built
  rt::Executable exe_;
};

}  // namespace
#endif

std::unique_ptr<ProgramRunner> deviceRunner(const Graph& g, const CompileOptions& o) {
  requireCudaDevice();  // "no CUDA device" before any compile work
#ifdef FUSEC_HAVE_CUDA
  return std::make_unique<DeviceRunner>(g, o);
#else
  (void)g, (void)o;
  return nullptr;  // not reached: requireCudaDevice threw
#endif
}

}  // namespace fusec::api
