// `fusec run` on the GPU: the finite-value contract (tests/unit/nonfinite_checks.h) and
// resumable runs (tests/unit/resume_checks.h) through the compiled step (fused AdamW kernels,
// CUDA graph).
#include <unistd.h>

#include "nonfinite_checks.h"
#include "resume_checks.h"
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

// Stopped and resumed through the compiled step (CUDA graph, fused AdamW with its step
// counter): the same losses and weights as the run never stopped, bit for bit.
TEST(RunOnDevice, AResumedRunEqualsTheRunNeverStopped) {
  SKIP_WITHOUT_DEVICE();
  ScratchDir d("fusec_gpu_resume");
  checkResumedRunMatchesUninterrupted(d.path, "cuda");
}

TEST(RunOnDevice, AResumedBf16RunEqualsTheRunNeverStopped) {
  SKIP_WITHOUT_DEVICE();
  ScratchDir d("fusec_gpu_resume_bf16");
  checkResumedRunMatchesUninterrupted(d.path, "cuda", "bf16");
}

TEST(RunOnDevice, AKilledRunResumesFromItsLastCheckpoint) {
  SKIP_WITHOUT_DEVICE();
  ScratchDir d("fusec_gpu_resume_killed");
  checkKilledRunResumes(d.path, "cuda");
}

// A model and batch that cannot fit (small at batch 4096: 478 GiB, while its weights
// initialise in a second): run and profile fail before allocating anything with one error
// line saying what is needed and what is free (profile's progress lines come before it);
// bench reports the row as OOM and exits 0.
TEST(RunOnDevice, AModelThatCannotFitIsOneLineOutOfMemory) {
  SKIP_WITHOUT_DEVICE();
  const std::string shape = " --model small --batch 4096 --ctx 256 --dtype bf16";
  for (const std::string& cmd : {"run --program train_step --random-inputs" + shape,
                                "profile --program train_step" + shape}) {
    auto [out, rc] = runCommand(test::fusecBinary() + " " + cmd + " 2>&1");
    EXPECT_EQ(rc, 1) << cmd << "\n" << out;
    const size_t last = out.rfind('\n', out.size() - 2) + 1;  // npos + 1 = 0: one line
    EXPECT_EQ(out.find("error: "), last) << cmd << "\n" << out;
    EXPECT_EQ(out.find("error: out of GPU memory: needs ", last), last) << cmd << "\n" << out;
    EXPECT_EQ(out.substr(out.size() - 10), " GiB free\n") << out;
    if (cmd.starts_with("run")) {
      EXPECT_EQ(countLines(out), 1) << out;
    }
  }
  auto [out, rc] = runCommand(test::fusecBinary() + " bench" + shape +
                              " --passes step --impl compiled --warmup 1 --iters 1 2>/dev/null");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("OOM"), std::string::npos) << out;
}

}  // namespace
}  // namespace fusec::test
