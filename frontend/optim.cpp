#include "frontend/optim.h"

#include <cmath>

namespace fusec::fe {

AdamW::AdamW(const AdamWConfig& cfg, const Tensor& step) : cfg_(cfg) {
  if (step.type() != Type{DType::f32, {}}) throw Error("AdamW step must be f32[], got " + step.type().str());
  if (!(cfg.lr >= 0) || !(cfg.eps >= 0) || !(cfg.weightDecay >= 0))
    throw Error("AdamW lr, eps and weight decay must be non-negative");
  if (!(cfg.beta1 >= 0 && cfg.beta1 < 1) || !(cfg.beta2 >= 0 && cfg.beta2 < 1))
    throw Error("AdamW betas must lie in [0, 1)");
  // The bias corrections 1 - beta^t without f32 cancellation (torch computes them in double;
  // 1 - pow(0.999f, 1) in f32 is off by 1e-5 relative): 1 - beta^t = -expm1(t ln beta), and
  // expm1(x) = 2 tanh(x/2) / (1 - tanh(x/2)) keeps full relative precision for small |x|.
  // beta = 0 gives ln beta = -inf, tanh = -1 and a correction of 1, as 0^t = 0 wants.
  auto biasCorrection = [&](double beta) {
    Tensor th = (step * (0.5 * std::log(beta))).tanh();
    return -2.0 * th / (1.0 - th);
  };
  Tensor bc1 = biasCorrection(cfg.beta1);
  Tensor bc2 = biasCorrection(cfg.beta2);
  stepSize_ = (cfg.lr / bc1).named("adamw.step_size");
  bc2Sqrt_ = bc2.sqrt().named("adamw.bc2_sqrt");
}

AdamW::Update AdamW::update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v) const {
  if (g.type() != p.type() || m.type() != p.type() || v.type() != p.type())
    throw Error("AdamW update needs param, grad and state of one type, got " + p.type().str() + ", " + g.type().str() +
                ", " + m.type().str() + ", " + v.type().str());
  const AdamWConfig& c = cfg_;
  Tensor decayed = c.weightDecay != 0 ? p * (1.0 - c.lr * c.weightDecay) : p;
  Tensor m1 = m * c.beta1 + g * (1.0 - c.beta1);
  Tensor v1 = v * c.beta2 + g.square() * (1.0 - c.beta2);
  Tensor denom = v1.sqrt() / bc2Sqrt_ + c.eps;
  Tensor p1 = decayed - stepSize_ * (m1 / denom);
  return {p1, m1, v1};
}

}  // namespace fusec::fe
