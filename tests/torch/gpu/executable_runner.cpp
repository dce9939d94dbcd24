#include "gpu/executable_runner.h"

namespace fusec::test {

std::unique_ptr<ProgramRunner> executableRunner(const Graph& g, bool gemmAutotune) {
  // eager's f32 matmuls are strict too (torch's default allow_tf32 = False)
  return api::deviceRunner(g, {.device = api::Device::Cuda, .tf32 = false, .gemmAutotune = gemmAutotune});
}

}  // namespace fusec::test
