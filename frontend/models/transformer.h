// The CS336 BasicsTransformerLM, traced into IR programs:
//   token embedding [vocab, d]
//   num_layers pre-norm blocks:  x = x + attn(rmsnorm(x));  x = x + ffn(rmsnorm(x))
//     attn: causal multi-head self-attention, separate q/k/v/output projections (no biases,
//           Linear weights [out, in], y = x W^T), RoPE on q and k (adjacent pairs, positions
//           0..T-1), softmax(q k^T / sqrt(d_head)) v as the IR `attention` composite
//     ffn:  SwiGLU w2(silu(w1 x) * w3 x)
//   final RMSNorm (eps 1e-5), untied lm_head [vocab, d]
// Parameter names, shapes and order are those of the PyTorch state_dict.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "frontend/optim.h"
#include "frontend/tensor.h"
#include "ir/graph.h"

namespace fusec::models {

struct ModelConfig {
  std::string name;
  int64_t vocab = 10000, ctx = 1024, dModel = 0, layers = 0, heads = 0, dFF = 0;
  double ropeTheta = 10000, eps = 1e-5;
};

// small medium large xl 2.7B tiny; throws Error("unknown model 'x' (known: ...)").
ModelConfig namedConfig(const std::string& name);
std::vector<std::string> modelNames();
// The most transformer blocks a model may have: a step's graph grows with them, and a size far
// past any trained model is a typo, not a request.
constexpr int64_t kMaxLayers = 4096;
// Throws Error unless every size is positive, d_model % heads == 0, d_head is even, there are
// at most kMaxLayers layers and no weight (nor the whole model) passes kMaxElements.
void validate(const ModelConfig&);

enum class Init { Linear, Embedding, Ones, Zeros };
struct ParamSpec {
  std::string name;
  Shape shape;
  Init init;
  int64_t layer = -1;  // the transformer block it belongs to (its `layer` role attribute)
};
std::vector<ParamSpec> parameterSpecs(const ModelConfig&);  // state_dict order and names
int64_t parameterCount(const ModelConfig&);

using AdamWConfig = fe::AdamWConfig;  // lr, beta1, beta2, eps, weightDecay (torch defaults but wd 0.01)

// Traces the model on `ids` (integer [B, T], T <= ctx) with the given parameters (by
// state_dict name); returns the logits f32[B, T, vocab].
fe::Tensor traceLogits(const ModelConfig&, const std::map<std::string, fe::Tensor>& params, const fe::Tensor& ids);
// One f32 `param` op per ParamSpec, in state_dict order.
std::map<std::string, fe::Tensor> declareParameters(Builder&, const ModelConfig&);

// @forward: input "ids" i64[B,T] (T <= ctx); params by state_dict name (f32); returns the
// logits f32[B,T,vocab].
Graph& buildForward(Module&, const ModelConfig&, int64_t batch, int64_t seq);
// @train_step before the training passes: inputs "ids", "targets" i64[B,T], params by
// state_dict name (f32); returns only the loss f32[] (mean cross entropy). The autodiff and
// adamw passes (passes/train_passes.h) turn it into the training step.
Graph& buildTrainLoss(Module&, const ModelConfig&, int64_t batch, int64_t seq);
// @train_step: inputs "ids", "targets" i64[B,T] and "step" f32[] (the 1-based AdamW step t);
// params: each weight by name plus "<name>.exp_avg" and "<name>.exp_avg_sq" (f32, same
// shape); returns the loss f32[] (mean cross entropy), then for each ParamSpec in order: new
// weight, new exp_avg, new exp_avg_sq, each marked as the in-place update of its param
// (`-> "name"`). buildTrainLoss, then the autodiff and adamw passes on that function.
Graph& buildTrainStep(Module&, const ModelConfig&, int64_t batch, int64_t seq, const AdamWConfig&);

}  // namespace fusec::models
