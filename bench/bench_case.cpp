#include "bench/bench_case.h"

#include "frontend/models/zoo_model.h"

namespace fusec::bench {

Bindings benchInputs(const models::ModelConfig& cfg, int64_t batch, int64_t seq, uint64_t seed) {
  auto model = models::transformerModel(cfg);
  Bindings env = model->initialWeights(seed);
  for (auto& [name, t] : model->exampleInputs({"train_step", batch, seq}, seed)) env[name] = std::move(t);
  return env;
}

}  // namespace fusec::bench
