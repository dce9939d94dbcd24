// AdamW for traced programs: fe::AdamW wraps the IR builder of passes/adamw_update.h (the
// torch.optim.AdamW semantics are written there) in Tensors, so a model traced by hand and
// the `adamw` pass build the same update.
#pragma once
#include "frontend/tensor.h"
#include "passes/adamw_update.h"

namespace fusec::fe {

using AdamWConfig = fusec::AdamWConfig;

class AdamW {
 public:
  // `step`: f32[] holding t (1-based). Throws Error as AdamWUpdate does.
  AdamW(const AdamWConfig& cfg, const Tensor& step) : impl_(step.builder(), cfg, step.value()), b_(&step.builder()) {}

  struct Update {
    Tensor param, expAvg, expAvgSq;
  };
  // One parameter's update; all four tensors share one float type.
  Update update(const Tensor& param, const Tensor& grad, const Tensor& expAvg, const Tensor& expAvgSq) const {
    AdamWUpdate::Update u = impl_.update(param.value(), grad.value(), expAvg.value(), expAvgSq.value());
    return {Tensor(b_, u.param), Tensor(b_, u.expAvg), Tensor(b_, u.expAvgSq)};
  }

  const AdamWConfig& config() const { return impl_.config(); }

 private:
  AdamWUpdate impl_;
  Builder* b_;
};

}  // namespace fusec::fe
