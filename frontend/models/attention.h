// The naive causal attention programs of the CS336 attention benchmark: q, k, v are
// f32[B, N, d] (one head, batch B), scores scaled by 1/sqrt(d), key j visible to query i
// when j <= i, softmax over the keys.
//
//   @attention           inputs q, k, v              -> out = softmax(mask(q k^T / sqrt d)) v
//   @attention_backward  inputs q, k, v, grad_out    -> dq, dk, dv: the vector-Jacobian product
//                                                       of @attention at grad_out, i.e. what
//                                                       torch's out.backward(grad_out) gives
//                                                       (traced as @attention with the cotangent
//                                                       grad_out; autodiff makes the VJP).
//
// The backward program stands alone (the seeds time the backward apart from the forward,
// and a program keeps no state between runs), so it recomputes the scores and P = softmax(S)
// from q and k instead of reading a saved P; the forward's output GEMM P v is not needed and
// is gone after dce. An eager forward, by contrast, keeps P for its backward: that
// [B, N, N] tensor is the "memory saved for backward" (savedForBackwardBytes).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/pipeline.h"

namespace fusec::models {

// "attention", "attention_backward".
const std::vector<std::string>& attentionProgramNames();
bool isAttentionProgram(const std::string& program);

// Adds the function `program` (one of attentionProgramNames(), also the function's name) to
// `m`: traced only, no pass runs here. Throws Error for another name or a non-positive size.
// attention_backward is the causal attention of q, k, v with the input grad_out of role
// cotangent (ir/roles.h): its program passes (passes/pipeline.h) make it the VJP, returning
// dq, dk, dv. Naive, autodiff differentiates decompose-attention's primitives (the backward
// computes P with a softmax and never needs o); fused, the VJP is the attention_backward
// composite, which reads the forward's o and lse.
// `inputs` is the dtype of q, k, v (and grad_out): f32 as above, or bf16, which a bf16 program
// then reads as it is, as PyTorch's SDPA is handed bf16 tensors (the f32 form spends a cast
// kernel on each input, and on each gradient back to f32, that SDPA's timings do not have).
Graph& buildAttentionProgram(Module& m, const std::string& program, int64_t batch, int64_t seq, int64_t d,
                             DType inputs = DType::f32);
Graph& buildAttention(Module& m, int64_t batch, int64_t seq, int64_t d, DType inputs = DType::f32);
Graph& buildAttentionBackward(Module& m, int64_t batch, int64_t seq, int64_t d, DType inputs = DType::f32);

// `program` as `fusec compile --program <program>` gives it: traced, its program passes at
// `dtype` with `lowering`, then the default optimisation pipeline (GEMMs and fused kernels
// over a planned arena), verified after every pass. The module is the function's only owner.
std::unique_ptr<Module> compileAttentionProgram(const std::string& program, int64_t batch, int64_t seq, int64_t d,
                                                AttentionLowering lowering = AttentionLowering::Naive,
                                                DType dtype = DType::f32, DType inputs = DType::f32);

// Bytes of the attention probabilities P [B, N, N] that naive eager attention keeps from its
// forward for its backward, at `elementBytes` per element (4 for f32): the dominant memory
// cost of naive attention (B 8, N 16384, f32: 8 GiB).
int64_t savedForBackwardBytes(int64_t batch, int64_t seq, int64_t elementBytes = 4);

}  // namespace fusec::models
