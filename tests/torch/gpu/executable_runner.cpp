#include "gpu/executable_runner.h"

#include "codegen/cubin_cache.h"
#include "runtime/executable.h"

namespace fusec::test {

namespace {

class ExecutableRunner final : public ProgramRunner {
 public:
  ExecutableRunner(const Graph& g, bool gemmAutotune)
      : cache_(codegen::CubinCache::defaultDir()), exe_(g, options(cache_, gemmAutotune)) {}

  void bind(Bindings&& values) override {
    exe_.bind(values);
    values.clear();  // the host copies are on the device now: a big model's state is not held twice
  }
  void run() override { exe_.run(); }
  HostTensor output(size_t i) override { return exe_.output(i); }
  HostTensor read(const std::string& name) override { return exe_.read(name); }

 private:
  static rt::ExecutableOptions options(const codegen::CubinCache& cache, bool gemmAutotune) {
    rt::ExecutableOptions o;
    o.cache = &cache;
    o.gemmAutotune = gemmAutotune;
    o.tf32 = false;  // eager's f32 matmuls are strict too (torch's default allow_tf32 = False)
    return o;
  }

  codegen::CubinCache cache_;  // before exe_: it is used while exe_ is built
  rt::Executable exe_;
};

}  // namespace

std::unique_ptr<ProgramRunner> executableRunner(const Graph& g, bool gemmAutotune) {
  return std::make_unique<ExecutableRunner>(g, gemmAutotune);
}

}  // namespace fusec::test
