// AdamW as traced IR, with torch.optim.AdamW semantics (decoupled weight decay applied
// first, bias corrections from the 1-based step t):
//   p  = p * (1 - lr * wd)
//   m  = b1 m + (1 - b1) g
//   v  = b2 v + (1 - b2) g^2
//   p  = p - (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// which is p - lr * m_hat / (sqrt(v_hat) + eps), written the way torch computes it.
#pragma once
#include "frontend/tensor.h"

namespace fusec::fe {

struct AdamWConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0.01;
};

class AdamW {
 public:
  // `step`: f32[] holding t (1-based). The per-step scalars (step size, bias correction)
  // are traced once here and shared by every parameter's update.
  AdamW(const AdamWConfig& cfg, const Tensor& step);

  struct Update {
    Tensor param, expAvg, expAvgSq;
  };
  // One parameter's update; all four tensors share one float shape.
  Update update(const Tensor& param, const Tensor& grad, const Tensor& expAvg, const Tensor& expAvgSq) const;

  const AdamWConfig& config() const { return cfg_; }

 private:
  AdamWConfig cfg_;
  Tensor stepSize_;  // lr / (1 - b1^t), f32[]
  Tensor bc2Sqrt_;   // sqrt(1 - b2^t), f32[]
};

}  // namespace fusec::fe
