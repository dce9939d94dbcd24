// `fusec run` on the CPU interpreter: non-finite weights and losses (nonfinite_checks.h).
#include "nonfinite_checks.h"

namespace fusec::test {
namespace {

TEST(NonFinite, WeightsHoldingNanAreRefusedAtLoad) {
  ScratchDir d("fusec_nonfinite_weights");
  checkNonFiniteWeightsAreRefused(d.path, "cpu");
}

TEST(NonFinite, RunStopsAtTheFirstNonFiniteLossWithTheLastGoodWeights) {
  ScratchDir d("fusec_nonfinite_loss");
  checkRunStopsAtTheFirstNonFiniteLoss(d.path, "cpu");
}

}  // namespace
}  // namespace fusec::test
