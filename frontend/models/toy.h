// The CS336 mixed-precision ToyModel (assignment 2, "benchmarking mixed precision"):
//   fc1 = Linear(in, 10, bias=False) -> relu -> ln = LayerNorm(10) -> fc2 = Linear(10, out,
//   bias=False)
// small enough to read every dtype of its autocast'ed training step. Values are named fc1,
// relu, layernorm, logits (and loss), params by their state_dict names.
#pragma once
#include <cstdint>
#include <vector>

#include "frontend/models/transformer.h"

namespace fusec::models {

struct ToyConfig {
  int64_t inFeatures = 20, outFeatures = 5;
  static constexpr int64_t kHidden = 10;
};

// fc1.weight, ln.weight, ln.bias, fc2.weight (state_dict order).
std::vector<ParamSpec> toyParameterSpecs(const ToyConfig&);

// @forward: input "x" f32[B, in]; returns the logits f32[B, out].
Graph& buildToyForward(Module&, const ToyConfig&, int64_t batch);
// @train_step before the training passes: inputs "x" f32[B, in] and "targets" i64[B];
// returns the loss f32[] (mean cross entropy of the logits).
Graph& buildToyTrainLoss(Module&, const ToyConfig&, int64_t batch);

}  // namespace fusec::models
