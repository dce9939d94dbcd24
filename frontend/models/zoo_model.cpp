#include "frontend/models/zoo_model.h"

#include <algorithm>

#include "frontend/models/attention.h"

namespace fusec::models {

namespace {

const HostTensor& requireInput(const Bindings& inputs, const std::string& name, const Type& want) {
  auto it = inputs.find(name);
  if (it == inputs.end()) throw Error("missing input '" + name + "' (expected " + want.str() + ")");
  if (it->second.type != want) throw Error("input '" + name + "' is " + it->second.type.str() + ", expected " + want.str());
  return it->second;
}

void checkTokens(const HostTensor& t, const std::string& name, int64_t vocab) {
  const int64_t T = t.type.shape.back();
  for (size_t k = 0; k < t.i.size(); ++k)
    if (t.i[k] < 0 || t.i[k] >= vocab)
      throw Error("token id " + std::to_string(t.i[k]) + " at " + name + "[" + std::to_string(int64_t(k) / T) + "," +
                  std::to_string(int64_t(k) % T) + "] is out of range for vocab " + std::to_string(vocab));
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
    checkTokens(requireInput(inputs, "ids", tokens), "ids", cfg_.vocab);
    if (trains(p.name)) checkTokens(requireInput(inputs, "targets", tokens), "targets", cfg_.vocab);
  }

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
    const HostTensor& t = requireInput(inputs, "targets", Type{DType::i64, {p.batch}});
    for (size_t k = 0; k < t.i.size(); ++k)
      if (t.i[k] < 0 || t.i[k] >= cfg_.outFeatures)
        throw Error("target " + std::to_string(t.i[k]) + " at targets[" + std::to_string(k) + "] is out of range for " +
                    std::to_string(cfg_.outFeatures) + " classes");
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
    return buildAttentionProgram(m, p.name, p.batch, p.seq, d_, resolveAttentionLowering(p.name, o.attention));
  }

  void validateInputs(const api::Program& p, const Bindings& inputs) const override {
    const Type qkv{DType::f32, {p.batch, p.seq, d_}};
    for (const char* n : {"q", "k", "v"}) requireInput(inputs, n, qkv);
    if (p.name == "attention_backward") requireInput(inputs, "grad_out", qkv);
  }

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
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    std::string known;
    for (const auto& n : names) known += n + ", ";
    throw Error("unknown model '" + name + "' (known: " + known + "toy)");
  }
  return transformerModel(namedConfig(name));
}

}  // namespace fusec::models
