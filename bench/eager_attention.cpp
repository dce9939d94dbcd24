#include "bench/eager_attention.h"

#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "bench/torch_convert.h"

namespace fusec::bench {

namespace {

torch::Tensor naiveCausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t N = q.size(-2), d = q.size(-1);
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(d));
  auto causal = torch::ones({N, N}, torch::TensorOptions().dtype(torch::kBool).device(q.device())).tril();
  scores = scores.masked_fill(causal.logical_not(), -std::numeric_limits<float>::infinity());
  return torch::matmul(torch::softmax(scores, -1), v);
}

// Copies rows [b0, b0 + chunk) of the batch into `dst` (f32[B, N, d] on the host).
void storeChunk(const torch::Tensor& src, HostTensor& dst, int64_t b0) {
  torch::Tensor c = src.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  const size_t perBatch = size_t(dst.type.shape[1] * dst.type.shape[2]);
  std::memcpy(dst.f.data() + size_t(b0) * perBatch, c.data_ptr<float>(), size_t(c.numel()) * sizeof(float));
}

}  // namespace

AttentionResult eagerAttention(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                               const HostTensor& gradOut, const EagerAttentionOptions& opts) {
  const Type& t = q.type;
  if (t.dtype != DType::f32 || t.rank() != 3)
    throw Error("eager attention: q must be f32[B, N, d], got " + t.str());
  for (const HostTensor* x : {&k, &v, &gradOut})
    if (x->type != t) throw Error("eager attention: k, v and grad_out must be " + t.str() + ", got " + x->type.str());
  const int64_t B = t.shape[0];
  const int64_t chunk = opts.batchChunk > 0 ? std::min(opts.batchChunk, B) : B;
  AttentionResult r{HostTensor::zeros(t), HostTensor::zeros(t), HostTensor::zeros(t), HostTensor::zeros(t)};
  guarded("eager attention", [&] {
    const torch::Device dev(opts.device);
    torch::NoGradGuard outer;  // uploads and slices record nothing; the chunk enables grad itself
    const torch::Tensor Q = toTorch(q, dev), K = toTorch(k, dev), V = toTorch(v, dev), G = toTorch(gradOut, dev);
    for (int64_t b0 = 0; b0 < B; b0 += chunk) {
      const int64_t b1 = std::min(B, b0 + chunk);
      torch::AutoGradMode grad(true);
      auto qc = Q.slice(0, b0, b1).clone().requires_grad_(true);
      auto kc = K.slice(0, b0, b1).clone().requires_grad_(true);
      auto vc = V.slice(0, b0, b1).clone().requires_grad_(true);
      auto out = naiveCausalAttention(qc, kc, vc);
      out.backward(G.slice(0, b0, b1));
      storeChunk(out, r.out, b0);
      storeChunk(qc.grad(), r.dq, b0);
      storeChunk(kc.grad(), r.dk, b0);
      storeChunk(vc.grad(), r.dv, b0);
    }
  });
  releaseCachedCudaMemory();
  return r;
}

}  // namespace fusec::bench
