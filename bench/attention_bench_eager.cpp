// The eager side of `fusec bench attention`: naive causal attention written as the CS336
// benchmark (and bench/eager_attention.cpp, the oracle) writes it, on the whole batch at once
// (no chunking: eager's [B, N, N] intermediates are what runs out of memory), with the forward
// and the backward timed apart. bench/eager_attention.h cannot serve here: it runs forward and
// backward as one call and copies the results to the host.
#include <torch/torch.h>

#include <cmath>

#include "bench/attention_bench.h"
#include "bench/timer.h"
#include "bench/torch_convert.h"
#include "frontend/models/attention.h"

namespace fusec::bench {

namespace {

AttentionRun run(const AttentionCase& c) {
  const bool bf16 = c.dtype == "bf16";
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(bf16 ? torch::kBFloat16 : torch::kFloat32);
  torch::manual_seed(0);
  torch::Tensor q = torch::randn({c.batch, c.seq, c.d}, opts).requires_grad_(true);
  torch::Tensor k = torch::randn({c.batch, c.seq, c.d}, opts).requires_grad_(true);
  torch::Tensor v = torch::randn({c.batch, c.seq, c.d}, opts).requires_grad_(true);
  const torch::Tensor gradOut = torch::randn({c.batch, c.seq, c.d}, opts);
  const torch::Tensor future = torch::ones({c.seq, c.seq}, opts.dtype(torch::kBool)).triu(1);
  const double scale = 1.0 / std::sqrt(double(c.d));
  auto forward = [&] {
    torch::Tensor s = torch::matmul(q, k.transpose(-2, -1)) * scale;
    return torch::matmul(torch::softmax(s.masked_fill(future, -INFINITY), -1), v);
  };
  AttentionRun r;
  // The forward as a training step runs it: autograd records the graph (and keeps P).
  r.forwardMs = timeOnStream([&] { forward(); }, nullptr, c.warmup, c.iters);
  // Each backward needs a fresh forward, run untimed before its timed backward.
  for (int i = 0; i < c.warmup + c.iters; ++i) {
    q.mutable_grad() = k.mutable_grad() = v.mutable_grad() = torch::Tensor();
    torch::Tensor out = forward();
    auto ms = timeOnStream([&] { out.backward(gradOut); }, nullptr, 0, 1);
    if (i >= c.warmup) r.backwardMs.push_back(ms.at(0));
  }
  torch::cuda::synchronize();
  r.savedBytes = models::savedForBackwardBytes(c.batch, c.seq, bf16 ? 2 : 4);
  r.peakBytes = cudaAllocatorPeaks().allocated;
  return r;
}

}  // namespace

AttentionRun runEagerAttention(const AttentionCase& c) {
  resetCudaAllocator();
  try {
    AttentionRun r = guarded("attention", [&] { return run(c); });
    resetCudaAllocator();
    return r;
  } catch (...) {
    resetCudaAllocator();  // an OOM leaves cached blocks behind; the next row must not inherit them
    throw;
  }
}

}  // namespace fusec::bench
