// A model as the benchmark sees it: the api::Model the compiled side traces, and, for the
// zoo's transformers, their configuration, which the eager LibTorch side (bench/eager_model.h)
// and the closed-form FLOP count need. An imported model (.fir) has no configuration: its
// eager and torch.compile rows come from the PyTorch module itself (bench/torch_module_ref.py),
// and its model FLOPs are counted on its traced forward.
#pragma once
#include <memory>
#include <optional>

#include "api/model.h"
#include "bench/flops.h"
#include "frontend/models/transformer.h"

namespace fusec::bench {

struct BenchModel {
  std::shared_ptr<const api::Model> model;
  std::optional<models::ModelConfig> zoo;

  std::string name() const { return model->name(); }
  // The longest sequence it takes (an imported model: the one it was exported at).
  int64_t contextLength() const;
  // Model FLOPs per token (bench/flops.h): the zoo's formula, else counted on the traced forward.
  double flopsPerToken(int64_t seq, BenchPass pass) const;
};

BenchModel zooBenchModel(const models::ModelConfig& cfg);
BenchModel importedBenchModel(std::shared_ptr<const api::Model> model);

}  // namespace fusec::bench
