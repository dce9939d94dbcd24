// The LibTorch eager reference of naive causal attention, as the CS336 attention benchmark
// writes it: S = q k^T / sqrt(d), masked_fill(-inf) above the diagonal, softmax over the
// keys, P v; the backward is autograd's, at a given grad_out. The oracle for fusec's
// attention programs (frontend/models/attention.h). Like eager_model.h, no torch types here.
#pragma once
#include <cstdint>
#include <string>

#include "ir/host_tensor.h"

namespace fusec::bench {

struct EagerAttentionOptions {
  std::string device = "cpu";  // any torch device string: "cpu", "cuda"
  // Batch elements per forward+backward (0: the whole batch at once). Attention is
  // independent per batch element, so chunks give the same result with a fraction of the
  // [B, N, N] intermediates: the reference still fits where a whole-batch eager run would not.
  int64_t batchChunk = 0;
};

struct AttentionResult {
  HostTensor out, dq, dk, dv;  // each f32[B, N, d]
};

// out for q, k, v f32[B, N, d], and dq, dk, dv = the VJP at grad_out (same shape). f32
// throughout: TF32 stays off (LibTorch's default for matmuls). Throws Error (one line) on a
// shape mismatch or any LibTorch error, out of memory included. On CUDA, the memory LibTorch
// cached is handed back afterwards, so a compiled program that runs next has it.
// (eager_model.h's torchCudaAvailable says whether "cuda" can be used.)
AttentionResult eagerAttention(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                               const HostTensor& gradOut, const EagerAttentionOptions& opts = {});

}  // namespace fusec::bench
