#include "bench/bench_case.h"

#include <random>

#include "frontend/init.h"

namespace fusec::bench {

Bindings benchInputs(const models::ModelConfig& cfg, int64_t batch, int64_t seq, uint64_t seed) {
  Bindings env = initParameters(cfg, seed);
  std::mt19937_64 rng(seed ^ 0x746f6b656e73ull);  // "tokens": independent of the weights' streams
  std::uniform_int_distribution<int64_t> token(0, cfg.vocab - 1);
  for (const char* name : {"ids", "targets"}) {
    HostTensor t = HostTensor::zeros(Type{DType::i64, {batch, seq}});
    for (auto& x : t.i) x = token(rng);
    env[name] = std::move(t);
  }
  return env;
}

}  // namespace fusec::bench
