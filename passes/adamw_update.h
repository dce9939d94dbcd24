// torch.optim.AdamW as IR, appended through a Builder: the optimizer the `adamw` pass
// (passes/train_passes.h) adds to a train step, and the frontend's traced fe::AdamW
// (frontend/optim.h) wraps. Semantics (decoupled weight decay applied first, bias
// corrections from the 1-based step t):
//   p  = p * (1 - lr * wd)
//   m  = b1 m + (1 - b1) g
//   v  = b2 v + (1 - b2) g^2
//   p  = p - (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// which is p - lr * m_hat / (sqrt(v_hat) + eps), written the way torch computes it.
// Given the step's loss, a step whose loss is not finite (NaN, +-Inf) updates nothing: p, m
// and v keep their values (as GradScaler skips the step of an overflowed gradient), so a run
// stopped at its first non-finite loss still holds the state of its last good step, at the
// cost of one scalar read per kernel instead of a copy of the weights per step.
#pragma once
#include "ir/builder.h"

namespace fusec {

struct AdamWConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0.01;
};

class AdamWUpdate {
 public:
  // `step`: f32[] holding t (1-based). The per-step scalars (step size `adamw.step_size`,
  // bias correction `adamw.bc2_sqrt`) are built once here and shared by every parameter's
  // update. Throws Error on a step that is not f32[] or a config out of range.
  // `loss` (f32[], may be null: no guard): the step's loss; a non-finite one skips the update.
  AdamWUpdate(Builder& b, const AdamWConfig& cfg, Value* step, Value* loss = nullptr);

  struct Update {
    Value *param, *expAvg, *expAvgSq;
  };
  // One parameter's update; all four values share one float type.
  Update update(Value* param, Value* grad, Value* expAvg, Value* expAvgSq) const;

  const AdamWConfig& config() const { return cfg_; }

 private:
  Builder& b_;
  AdamWConfig cfg_;
  Value* stepSize_ = nullptr;  // lr / (1 - b1^t), f32[]
  Value* bc2Sqrt_ = nullptr;   // sqrt(1 - b2^t), f32[]
  Value* finite_ = nullptr;    // loss - loss == 0: the loss is finite, bool[] (null: no guard)
};

}  // namespace fusec
