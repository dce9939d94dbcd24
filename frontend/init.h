// Weight initialisation of the CS336 TransformerLM, deterministic in the seed on every
// platform (std::mt19937_64 is fully specified; the normal sampler is our own Box-Muller,
// because std::normal_distribution differs between standard libraries):
//   Linear [out, in]: truncated normal, std sqrt(2 / (in + out)), values outside +-3 std
//                     resampled (torch.nn.init.trunc_normal_(a=-3 std, b=3 std))
//   Embedding:        truncated normal, std 1, +-3
//   RMSNorm weights:  ones
// Each parameter draws from its own generator, seeded from (seed, name), so a tensor's values
// do not depend on which other parameters exist.
#pragma once
#include <cstdint>
#include <random>

#include "frontend/models/transformer.h"
#include "ir/host_tensor.h"

namespace fusec {

// One f32 tensor per ParamSpec, by state_dict name.
Bindings initParameters(const models::ModelConfig&, uint64_t seed);
HostTensor initParameter(const models::ParamSpec&, uint64_t seed);
// Zeros named <name>.exp_avg and <name>.exp_avg_sq for every parameter.
Bindings initAdamState(const models::ModelConfig&);

// Standard normal samples by Box-Muller over 53-bit uniforms of a mt19937_64.
class NormalSampler {
 public:
  explicit NormalSampler(uint64_t seed) : rng_(seed) {}
  double next();
  // A normal of standard deviation `std`, resampled until it lies within +-bound * std.
  double truncated(double std, double bound = 3.0);

 private:
  std::mt19937_64 rng_;
  double spare_ = 0;
  bool hasSpare_ = false;
};

}  // namespace fusec
