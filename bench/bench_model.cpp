#include "bench/bench_model.h"

#include "frontend/models/zoo_model.h"
#include "ir/graph.h"

namespace fusec::bench {

int64_t BenchModel::contextLength() const {
  if (zoo) return zoo->ctx;
  const auto [batch, seq] = model->onlyShape();
  return seq > 0 ? seq : model->contextLength();
}

double BenchModel::flopsPerToken(int64_t seq, BenchPass pass) const {
  if (zoo) return modelFlopsPerToken(*zoo, seq, pass);
  const auto [b, t] = model->onlyShape();
  const int64_t batch = b > 0 ? b : 1;
  Module m;
  const Graph& g = model->trace(m, api::Program{"forward", batch, seq}, api::CompileOptions{});
  const double forward = forwardFlops(g) / double(batch * seq);
  return pass == BenchPass::Forward ? forward : 3 * forward;
}

BenchModel zooBenchModel(const models::ModelConfig& cfg) { return {models::transformerModel(cfg), cfg}; }

BenchModel importedBenchModel(std::shared_ptr<const api::Model> model) { return {std::move(model), std::nullopt}; }

}  // namespace fusec::bench
