// `fusec run` on the GPU: the finite-value contract (tests/unit/nonfinite_checks.h) through
// the compiled step (fused AdamW kernels, CUDA graph).
#include <unistd.h>

#include "nonfinite_checks.h"
#include "runtime/device.h"

namespace fusec::test {
namespace {

#define SKIP_WITHOUT_DEVICE()                              \
  do {                                                     \
    std::string why;                                       \
    if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;   \
  } while (0)

TEST(RunOnDevice, WeightsHoldingNanAreRefusedAtLoad) {
  SKIP_WITHOUT_DEVICE();
  ScratchDir d("fusec_gpu_nonfinite_weights");
  checkNonFiniteWeightsAreRefused(d.path, "cuda");
}

TEST(RunOnDevice, RunStopsAtTheFirstNonFiniteLossWithTheLastGoodWeights) {
  SKIP_WITHOUT_DEVICE();
  ScratchDir d("fusec_gpu_nonfinite_loss");
  checkRunStopsAtTheFirstNonFiniteLoss(d.path, "cuda");
}

}  // namespace
}  // namespace fusec::test
