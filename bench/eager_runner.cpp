#include "bench/eager_runner.h"

#include <torch/torch.h>

#include "bench/eager_model.h"
#include "bench/timer.h"

// The allocator statistics exist only in CUDA builds of LibTorch (2.x on the GPU machine);
// a CPU build cannot run the eager side on "cuda" at all, and leaves the memory columns empty.
// (Debian's CPU LibTorch ships c10/cuda headers without the generated macros header.)
#if __has_include(<c10/cuda/CUDACachingAllocator.h>) && __has_include(<c10/cuda/impl/cuda_cmake_macros.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#define FUSEC_TORCH_CUDA_STATS 1
#endif

namespace fusec::bench {

namespace {

void resetAllocator() {
#ifdef FUSEC_TORCH_CUDA_STATS
  // The caching allocator sets up its per-device state on the first CUDA allocation; its
  // statistics calls reject every device ("Invalid device argument") before that.
  (void)torch::empty({1}, torch::TensorOptions().device(torch::kCUDA));
  c10::cuda::CUDACachingAllocator::emptyCache();
  c10::cuda::CUDACachingAllocator::resetPeakStats(0);
#endif
}

void readPeaks(TimedRun& r) {
#ifdef FUSEC_TORCH_CUDA_STATS
  // Index 0 is StatType::AGGREGATE (all pools); the enum moved namespaces across 2.x
  // releases (c10::CachingAllocator, c10::CachingDeviceAllocator), the index did not.
  const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  r.allocatedBytes = int64_t(s.allocated_bytes[0].peak);
  r.reservedBytes = int64_t(s.reserved_bytes[0].peak);
#else
  (void)r;
#endif
}

}  // namespace

TimedRun runEager(const BenchCase& c, const Bindings& env) {
  resetAllocator();
  TimedRun r;
  try {
    EagerModel model(c.cfg, env, EagerOptions{"cuda", c.dtype});
    model.stageTokens(env.at("ids"), env.at("targets"));
    auto call = [&] {
      switch (c.pass) {
        case BenchPass::Forward: return model.forwardStaged();
        case BenchPass::FwdBwd: return model.lossAndGradientsStaged();
        case BenchPass::Step: return model.trainStepStaged(c.adamw);
      }
    };
    // LibTorch launches on its current stream, the legacy default stream (bench/timer.h).
    r.ms = timeOnStream(call, nullptr, c.warmup, c.iters);
    readPeaks(r);
  } catch (...) {
    resetAllocator();  // an OOM leaves cached blocks behind; the next row must not inherit them
    throw;
  }
  resetAllocator();
  return r;
}

}  // namespace fusec::bench
