#include "bench/bench_case.h"


namespace fusec::bench {

Bindings benchInputs(const api::Model& model, int64_t batch, int64_t seq, uint64_t seed) {
  Bindings env = model.initialWeights(seed);
  for (auto& [name, t] : model.exampleInputs({"train_step", batch, seq}, seed)) env[name] = std::move(t);
  return env;
}

}  // namespace fusec::bench
