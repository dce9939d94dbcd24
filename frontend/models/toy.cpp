#include "frontend/models/toy.h"

namespace fusec::models {

using fe::Tensor;

namespace {

void check(const ToyConfig& c, int64_t batch) {
  if (c.inFeatures <= 0 || c.outFeatures <= 0)
    throw Error("toy model: in and out features must be positive, got " + std::to_string(c.inFeatures) + " and " +
                std::to_string(c.outFeatures));
  if (batch <= 0) throw Error("batch must be positive, got " + std::to_string(batch));
}

// The logits of the ToyModel on x [B, in], declaring its params in state_dict order.
Tensor traceToy(const ToyConfig& c, const Tensor& x) {
  Builder& b = x.builder();
  std::vector<Tensor> p;
  for (const ParamSpec& s : toyParameterSpecs(c)) p.push_back(fe::param(b, s.name, Type{DType::f32, s.shape}).named(s.name));
  Tensor h = fe::linear(x, p[0]).named("fc1");
  h = h.relu().named("relu");
  h = h.layerNorm(p[1], p[2]).named("layernorm");
  return fe::linear(h, p[3]).named("logits");
}

}  // namespace

std::vector<ParamSpec> toyParameterSpecs(const ToyConfig& c) {
  const int64_t h = ToyConfig::kHidden;
  return {{"fc1.weight", {h, c.inFeatures}, Init::Linear},
          {"ln.weight", {h}, Init::Ones},
          {"ln.bias", {h}, Init::Zeros},
          {"fc2.weight", {c.outFeatures, h}, Init::Linear}};
}

Graph& buildToyForward(Module& m, const ToyConfig& c, int64_t batch) {
  check(c, batch);
  Graph& g = m.add("forward");
  Builder b(g);
  Tensor x = fe::input(b, "x", Type{DType::f32, {batch, c.inFeatures}}).named("x");
  b.output(traceToy(c, x).value());
  return g;
}

Graph& buildToyTrainLoss(Module& m, const ToyConfig& c, int64_t batch) {
  check(c, batch);
  Graph& g = m.add("train_step");
  Builder b(g);
  Tensor x = fe::input(b, "x", Type{DType::f32, {batch, c.inFeatures}}).named("x");
  Tensor targets = fe::input(b, "targets", Type{DType::i64, {batch}}, Role::Targets).named("targets");
  b.output(fe::crossEntropy(traceToy(c, x), targets).named("loss").value());
  return g;
}

}  // namespace fusec::models
