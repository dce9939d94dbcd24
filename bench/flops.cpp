#include "bench/flops.h"

#include "ir/graph.h"

namespace fusec::bench {

BenchPass parsePass(const std::string& name) {
  if (name == "forward") return BenchPass::Forward;
  if (name == "fwd_bwd") return BenchPass::FwdBwd;
  if (name == "step") return BenchPass::Step;
  throw Error("unknown pass '" + name + "' (known: forward, fwd_bwd, step)");
}

const char* passName(BenchPass p) {
  switch (p) {
    case BenchPass::Forward: return "forward";
    case BenchPass::FwdBwd: return "fwd_bwd";
    case BenchPass::Step: return "step";
  }
  return "?";
}

// The "6N plus attention" count (Kaplan et al.; PaLM appendix B), GEMMs only:
//   per token, forward = 2 * N_gemm + L * 4 * T * d
// where N_gemm = L * (4 d^2 + 3 d d_ff) + d * vocab are the weights that multiply activations
// (q, k, v, output projections; SwiGLU's w1, w3, w2; the untied lm_head). The token embedding is
// a gather and the RMSNorm gains are pointwise: neither counts. Attention adds Q K^T and P V,
// 2 * T * d_head each per head, i.e. 4 * T * d per layer; the naive causal attention that both
// eager and fusec run computes the full T x T scores (the mask is applied afterwards), so T
// is not halved. Backward is twice forward (the gradient w.r.t. the input and w.r.t. the
// weight of every GEMM; for attention dP, dV, dQ, dK), so fwd_bwd = 3 x forward. The AdamW
// step is pointwise and memory-bound: it adds time but no model FLOPs, so step = fwd_bwd.
double modelFlopsPerToken(const models::ModelConfig& c, int64_t seq, BenchPass pass) {
  const double d = double(c.dModel), L = double(c.layers);
  const double gemmWeights = L * (4 * d * d + 3 * d * double(c.dFF)) + d * double(c.vocab);
  const double forward = 2 * gemmWeights + L * 4 * double(seq) * d;
  return pass == BenchPass::Forward ? forward : 3 * forward;
}

double forwardFlops(const Graph& g) {
  double flops = 0;
  for (const auto& op : g.ops) {
    if (op->kind == OpKind::Matmul) {
      const Type& a = op->operands[0]->type;
      const int64_t k = a.shape[size_t(a.rank() - (op->attrBool("transpose_a") ? 2 : 1))];
      flops += 2.0 * double(op->result()->type.numel()) * double(k);
    } else if (op->kind == OpKind::Attention) {
      const Type& k = op->operands[1]->type;
      const double tk = double(k.shape[size_t(k.rank() - 2)]);
      flops += 2.0 * tk * double(op->operands[0]->type.numel() + op->result()->type.numel());
    }
  }
  return flops;
}

}  // namespace fusec::bench
