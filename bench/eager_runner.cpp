#include "bench/eager_runner.h"

#include <torch/torch.h>

#include "bench/eager_model.h"
#include "bench/timer.h"
#include "bench/torch_convert.h"

namespace fusec::bench {


TimedRun runEager(const BenchCase& c, const Bindings& env) {
  resetCudaAllocator();
  TimedRun r;
  try {
    if (!c.model.zoo) throw Error("eager LibTorch rows are for the zoo's models; an imported model's eager rows come from its PyTorch module (--vs-torch)");
    EagerModel model(*c.model.zoo, env, EagerOptions{"cuda", c.dtype});
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
    const CudaAllocatorPeaks peaks = cudaAllocatorPeaks();
    if (peaks.allocated) r.allocatedBytes = *peaks.allocated;
    if (peaks.reserved) r.reservedBytes = *peaks.reserved;
  } catch (...) {
    resetCudaAllocator();  // an OOM leaves cached blocks behind; the next row must not inherit them
    throw;
  }
  resetCudaAllocator();
  return r;
}

}  // namespace fusec::bench
