#include "frontend/models/zoo_model.h"

#include <algorithm>
#include <random>

#include "frontend/init.h"
#include "frontend/models/attention.h"
#include "frontend/models/token_inputs.h"

namespace fusec::models {

namespace {

// Pointers, not references: GCC 13's -Wdangling-reference flags a reference returned from a
// call with temporary arguments.
const HostTensor* requireInput(const Bindings& inputs, const std::string& name, const Type& want) {
  auto it = inputs.find(name);
  if (it == inputs.end()) throw Error("missing tensor '" + name + "' (expected " + want.str() + ")");
  if (it->second.type != want) throw Error("tensor '" + name + "' is " + it->second.type.str() + ", expected " + want.str());
  return &it->second;
}

// The input that gives a program its shape: of `dtype` and rank `rank`, every dim at least 1.
// `want` spells the expected type for the messages ("i64[B,T]").
const Shape* shapeInput(const Bindings& inputs, const std::string& name, DType dtype, int rank, const std::string& want) {
  auto it = inputs.find(name);
  if (it == inputs.end()) throw Error("missing tensor '" + name + "' (expected " + want + ")");
  const Type& t = it->second.type;
  if (t.dtype != dtype || t.rank() != rank) throw Error("tensor '" + name + "' is " + t.str() + ", expected " + want);
  for (int64_t d : t.shape)
    if (d < 1) throw Error("tensor '" + name + "' is " + t.str() + ": every dimension must be at least 1");
  return &t.shape;
}

HostTensor normals(const Shape& shape, std::mt19937_64& rng) {
  NormalSampler normal(rng());
  HostTensor t = HostTensor::zeros(Type{DType::f32, shape});
  for (auto& x : t.f) x = float(normal.next());
  return t;
}

Bindings initial(const std::vector<ParamSpec>& specs, uint64_t seed) {
  Bindings out;
  for (const auto& s : specs) out.emplace(s.name, initParameter(s, seed));
  return out;
}

std::vector<api::ParamInfo> infos(const std::vector<ParamSpec>& specs) {
  std::vector<api::ParamInfo> out;
  for (const auto& s : specs) out.push_back({s.name, s.shape});
  return out;
}

bool trains(const std::string& program) { return program == "train_step" || program == "fwd_bwd"; }

class TransformerModel final : public api::Model {
 public:
  explicit TransformerModel(ModelConfig cfg) : cfg_(std::move(cfg)) { validate(cfg_); }
  std::unique_ptr<api::Model> clone() const override { return std::make_unique<TransformerModel>(cfg_); }
  std::string name() const override { return cfg_.name; }
  std::vector<api::ParamInfo> params() const override { return infos(parameterSpecs(cfg_)); }
  std::vector<std::string> programs() const override { return {"forward", "train_step", "fwd_bwd"}; }

  Graph& trace(Module& m, const api::Program& p, const api::CompileOptions&) const override {
    if (p.seq > cfg_.ctx)
      throw Error("sequence length " + std::to_string(p.seq) + " exceeds the context length " + std::to_string(cfg_.ctx) +
                  " of model '" + cfg_.name + "'");
    return trains(p.name) ? buildTrainLoss(m, cfg_, p.batch, p.seq) : buildForward(m, cfg_, p.batch, p.seq);
  }

  void validateInputs(const api::Program& p, const Bindings& inputs) const override {
    const Type tokens{DType::i64, {p.batch, p.seq}};
    checkTokenInput(inputs, "ids", tokens, cfg_.vocab);
    if (trains(p.name)) checkTokenInput(inputs, "targets", tokens, cfg_.vocab);
  }

  api::Program programFor(const std::string& program, const Bindings& inputs) const override {
    const Shape& bt = *shapeInput(inputs, "ids", DType::i64, 2, "i64[B,T]");
    if (bt[1] > cfg_.ctx)
      throw Error("tensor 'ids' has sequence length " + std::to_string(bt[1]) + ", more than the model's context " +
                  std::to_string(cfg_.ctx));
    return {program, bt[0], bt[1]};
  }

  Bindings initialWeights(uint64_t seed) const override { return initial(parameterSpecs(cfg_), seed); }

  Bindings exampleInputs(const api::Program& p, uint64_t seed) const override {
    return randomTokenInputs({p.batch, p.seq}, cfg_.vocab, trains(p.name), seed);
  }

  std::vector<std::pair<std::string, double>> config() const override {
    return {{"vocab", double(cfg_.vocab)}, {"ctx", double(cfg_.ctx)},     {"d_model", double(cfg_.dModel)},
            {"layers", double(cfg_.layers)}, {"heads", double(cfg_.heads)}, {"d_ff", double(cfg_.dFF)},
            {"rope_theta", cfg_.ropeTheta},  {"eps", cfg_.eps}};
  }
  int64_t contextLength() const override { return cfg_.ctx; }

 private:
  ModelConfig cfg_;
};

class ToyModel final : public api::Model {
 public:
  explicit ToyModel(ToyConfig cfg) : cfg_(cfg) {}
  std::unique_ptr<api::Model> clone() const override { return std::make_unique<ToyModel>(cfg_); }
  std::string name() const override { return "toy"; }
  std::vector<api::ParamInfo> params() const override { return infos(toyParameterSpecs(cfg_)); }
  std::vector<std::string> programs() const override { return {"forward", "train_step", "fwd_bwd"}; }

  Graph& trace(Module& m, const api::Program& p, const api::CompileOptions&) const override {
    return trains(p.name) ? buildToyTrainLoss(m, cfg_, p.batch) : buildToyForward(m, cfg_, p.batch);
  }

  void validateInputs(const api::Program& p, const Bindings& inputs) const override {
    requireInput(inputs, "x", Type{DType::f32, {p.batch, cfg_.inFeatures}});
    if (!trains(p.name)) return;
    const HostTensor& t = *requireInput(inputs, "targets", Type{DType::i64, {p.batch}});
    for (size_t k = 0; k < t.i.size(); ++k)
      if (t.i[k] < 0 || t.i[k] >= cfg_.outFeatures)
        throw Error("target " + std::to_string(t.i[k]) + " at targets[" + std::to_string(k) + "] is out of range for " +
                    std::to_string(cfg_.outFeatures) + " classes");
  }

  // The batch is x's; the toy model has no sequence axis (seq stays 1).
  api::Program programFor(const std::string& program, const Bindings& inputs) const override {
    const std::string want = "f32[B," + std::to_string(cfg_.inFeatures) + "]";
    const Shape& s = *shapeInput(inputs, "x", DType::f32, 2, want);
    if (s[1] != cfg_.inFeatures) throw Error("tensor 'x' is " + Type{DType::f32, s}.str() + ", expected " + want);
    return {program, s[0], 1};
  }

  Bindings initialWeights(uint64_t seed) const override { return initial(toyParameterSpecs(cfg_), seed); }

  Bindings exampleInputs(const api::Program& p, uint64_t seed) const override {
    std::mt19937_64 rng = exampleStream(seed);
    Bindings in;
    in["x"] = normals({p.batch, cfg_.inFeatures}, rng);
    if (trains(p.name)) in["targets"] = uniformIds({p.batch}, cfg_.outFeatures, rng);
    return in;
  }

  std::vector<std::pair<std::string, double>> config() const override {
    return {{"in_features", double(cfg_.inFeatures)}, {"hidden", double(ToyConfig::kHidden)},
            {"out_features", double(cfg_.outFeatures)}};
  }

 private:
  ToyConfig cfg_;
};

class AttentionModel final : public api::Model {
 public:
  explicit AttentionModel(int64_t d) : d_(d) {
    if (d < 1) throw Error("the attention head size must be at least 1, got " + std::to_string(d));
  }
  std::unique_ptr<api::Model> clone() const override { return std::make_unique<AttentionModel>(d_); }
  std::string name() const override { return "attention"; }
  std::vector<api::ParamInfo> params() const override { return {}; }
  std::vector<std::string> programs() const override { return attentionProgramNames(); }

  Graph& trace(Module& m, const api::Program& p, const api::CompileOptions& o) const override {
    return buildAttentionProgram(m, p.name, p.batch, p.seq, d_);
  }

  void validateInputs(const api::Program& p, const Bindings& inputs) const override {
    const Type qkv{DType::f32, {p.batch, p.seq, d_}};
    for (const char* n : {"q", "k", "v"}) requireInput(inputs, n, qkv);
    if (p.name == "attention_backward") requireInput(inputs, "grad_out", qkv);
  }

  api::Program programFor(const std::string& program, const Bindings& inputs) const override {
    const std::string want = "f32[B,N," + std::to_string(d_) + "]";
    const Shape& s = *shapeInput(inputs, "q", DType::f32, 3, want);
    if (s[2] != d_) throw Error("tensor 'q' is " + Type{DType::f32, s}.str() + ", expected " + want);
    return {program, s[0], s[1]};
  }

  Bindings initialWeights(uint64_t) const override { return {}; }

  Bindings exampleInputs(const api::Program& p, uint64_t seed) const override {
    std::mt19937_64 rng = exampleStream(seed);
    Bindings in;
    for (const char* n : {"q", "k", "v", "grad_out"})
      if (std::string(n) != "grad_out" || p.name == "attention_backward") in[n] = normals({p.batch, p.seq, d_}, rng);
    return in;
  }
  std::vector<std::pair<std::string, double>> config() const override { return {{"d_head", double(d_)}}; }

 private:
  int64_t d_;
};

}  // namespace

std::unique_ptr<api::Model> transformerModel(const ModelConfig& cfg) { return std::make_unique<TransformerModel>(cfg); }
std::unique_ptr<api::Model> toyModel(const ToyConfig& cfg) { return std::make_unique<ToyModel>(cfg); }
std::unique_ptr<api::Model> attentionModel(int64_t dHead) { return std::make_unique<AttentionModel>(dHead); }

std::unique_ptr<api::Model> modelByName(const std::string& name) {
  if (name == "toy") return toyModel();
  const auto names = modelNames();
  if (std::find(names.begin(), names.end(), name) == names.end())
    throw Error("unknown model '" + name + "' (known: " + builtinModelNames() + ")");
  return transformerModel(namedConfig(name));
}

std::string builtinModelNames() {
  std::string known;
  for (const auto& n : modelNames()) known += n + ", ";
  return known + "toy";
}

}  // namespace fusec::models
