#include "frontend/init.h"

#include <cmath>
#include <numbers>

namespace fusec {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t paramSeed(uint64_t seed, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a of the name
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  return splitmix64(splitmix64(seed) ^ h);
}

}  // namespace

double NormalSampler::next() {
  if (hasSpare_) {
    hasSpare_ = false;
    return spare_;
  }
  // u1 in (0, 1] so log(u1) is finite; u2 in [0, 1).
  const double u1 = double((rng_() >> 11) + 1) * 0x1.0p-53;
  const double u2 = double(rng_() >> 11) * 0x1.0p-53;
  const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * std::numbers::pi * u2;
  spare_ = r * std::sin(a);
  hasSpare_ = true;
  return r * std::cos(a);
}

double NormalSampler::truncated(double std, double bound) {
  for (;;) {
    const double z = next();
    if (std::abs(z) <= bound) return z * std;
  }
}

HostTensor initParameter(const models::ParamSpec& s, uint64_t seed) {
  HostTensor t = HostTensor::zeros(Type{DType::f32, s.shape});
  switch (s.init) {
    case models::Init::Ones: std::fill(t.f.begin(), t.f.end(), 1.0f); break;
    case models::Init::Zeros: break;  // LayerNorm biases
    case models::Init::Embedding:
    case models::Init::Linear: {
      double std = 1.0;
      if (s.init == models::Init::Linear) {
        if (s.shape.size() != 2) throw Error("linear parameter '" + s.name + "' must be [out, in]");
        std = std::sqrt(2.0 / double(s.shape[0] + s.shape[1]));
      }
      NormalSampler n(paramSeed(seed, s.name));
      for (float& x : t.f) x = float(n.truncated(std));
      break;
    }
  }
  return t;
}

Bindings initParameters(const models::ModelConfig& cfg, uint64_t seed) {
  Bindings b;
  for (const models::ParamSpec& s : models::parameterSpecs(cfg)) b.emplace(s.name, initParameter(s, seed));
  return b;
}

Bindings initAdamState(const models::ModelConfig& cfg) {
  Bindings b;
  for (const models::ParamSpec& s : models::parameterSpecs(cfg)) {
    b.emplace(s.name + ".exp_avg", HostTensor::zeros(Type{DType::f32, s.shape}));
    b.emplace(s.name + ".exp_avg_sq", HostTensor::zeros(Type{DType::f32, s.shape}));
  }
  return b;
}

}  // namespace fusec
