#include "ir/step_inputs.h"

#include "ir/roles.h"

namespace fusec {
namespace {

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

int64_t dropoutKey(uint64_t seed, int64_t step) {
  return int64_t(mix64(mix64(seed + 0x9E3779B97F4A7C15ull) ^ mix64(uint64_t(step) * 0x9E3779B97F4A7C15ull)));
}

Bindings stepInputs(const Graph& g, int64_t step, uint64_t dropoutSeed) {
  Bindings b;
  if (const Op* c = findInputByRole(g, Role::StepCount)) {
    HostTensor t = HostTensor::zeros(Type{DType::f32, {}});
    t.f[0] = float(step);
    b[c->attrStr("name")] = std::move(t);
  }
  if (const Op* k = findInputByRole(g, Role::DropoutKey)) {
    HostTensor t = HostTensor::zeros(Type{DType::i64, {}});
    t.i[0] = dropoutKey(dropoutSeed, step);
    b[k->attrStr("name")] = std::move(t);
  }
  return b;
}

}  // namespace fusec
