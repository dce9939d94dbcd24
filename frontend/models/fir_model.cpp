#include "frontend/models/fir_model.h"

#include <filesystem>
#include <unordered_set>

#include "frontend/models/token_inputs.h"
#include "frontend/safetensors.h"
#include "ir/builder.h"
#include "ir/parser.h"
#include "ir/roles.h"
#include "passes/fusion/kernel_family.h"
#include "support/ptr_hash.h"

namespace fusec::models {

namespace {

bool trains(const std::string& program) { return program == "train_step" || program == "fwd_bwd"; }

// The module at `path`, its kernel ops (a dumped fused program's) with their records checked.
std::unique_ptr<Module> read(const std::string& path) {
  auto module = parseFile(path);
  checkKernelRecords(*module);
  return module;
}

class FirModel final : public api::Model {
 public:
  explicit FirModel(std::string path) : path_(std::move(path)), module_(read(path_)) {  // errors name the file
    check(*module_);
    assignLayers(*module_->funcs[0]);
  }

  std::unique_ptr<api::Model> clone() const override { return std::make_unique<FirModel>(*this); }

  // The directory's name for DIR/model.fir (the exporter's layout), else the file's stem.
  std::string name() const override {
    const std::filesystem::path p(path_);
    const std::string dir = p.parent_path().filename().string();
    return p.stem() == "model" && !dir.empty() ? dir : p.stem().string();
  }

  std::vector<api::ParamInfo> params() const override { return params_; }
  std::vector<std::string> programs() const override { return {"forward", "train_step", "fwd_bwd"}; }

  Graph& trace(Module& m, const api::Program& p, const api::CompileOptions& o) const override {
    requireShape(p.batch, p.seq);
    std::unique_ptr<Graph> g = cloneGraph(*module_->funcs.at(0));
    if (!trains(p.name) || !o.dropout) withoutDropout(*g);  // PyTorch's eval mode: the forward drops it
    if (trains(p.name)) {
      // The zoo's loss: mean cross entropy of the logits over the targets.
      Builder b(*g);
      Value* logits = g->outputs.at(0);
      Value* targets = b.input("targets", Type{DType::i64, {batch_, seq_}});
      targets->name = "targets";
      setRole(*targets->def, Role::Targets);
      Value* loss = b.create1(OpKind::CrossEntropy, {logits, targets});
      loss->name = "loss";
      g->outputs = {loss};
      g->outputUpdates.clear();
      g->name = "train_step";
    }
    if (m.find(g->name)) throw Error("internal: the module already has a function @" + g->name);
    m.funcs.push_back(std::move(g));
    return *m.funcs.back();
  }

  void validateInputs(const api::Program& p, const Bindings& inputs) const override {
    checkTokenInput(inputs, "ids", tokens(), vocab_);
    if (trains(p.name)) checkTokenInput(inputs, "targets", tokens(), vocab_);
  }

  api::Program programFor(const std::string& program, const Bindings& inputs) const override {
    auto it = inputs.find("ids");
    if (it == inputs.end()) throw Error("missing tensor 'ids' (expected " + tokens().str() + ")");
    const Type& t = it->second.type;
    if (t.dtype != DType::i64 || t.rank() != 2) throw Error("tensor 'ids' is " + t.str() + ", expected " + tokens().str());
    requireShape(t.shape[0], t.shape[1]);
    return {program, batch_, seq_};
  }

  // The exporter's weights: the PyTorch model's own initialisation, or the state dict it was
  // given. The seed does not apply.
  Bindings initialWeights(uint64_t) const override {
    const std::filesystem::path w = std::filesystem::path(path_).parent_path() / "weights.safetensors";
    if (!std::filesystem::exists(w))
      throw Error(path_ + ": no weights.safetensors beside it (the exporter writes one); give the weights with --weights");
    return loadSafetensors(w.string());
  }

  Bindings exampleInputs(const api::Program& p, uint64_t seed) const override {
    return randomTokenInputs(tokens().shape, vocab_, trains(p.name), seed);
  }

  std::vector<std::pair<std::string, double>> config() const override {
    return {{"vocab", double(vocab_)}, {"batch", double(batch_)}, {"seq", double(seq_)}};
  }
  int64_t contextLength() const override { return seq_; }
  std::pair<int64_t, int64_t> onlyShape() const override { return {batch_, seq_}; }

 private:
  Type tokens() const { return Type{DType::i64, {batch_, seq_}}; }

  void fail(const std::string& what) const { throw Error(path_ + ": " + what); }

  // The module must be one @forward: ids in, logits out, weights and buffers as params.
  // A weight without a `layer` attribute (the exporter does not write one) takes the index
  // of its module list from its state_dict name, the first all-digit part ("transformer.h.3.
  // attn.c_attn.weight", "model.layers.3.mlp.up_proj.weight": 3), as the zoo's weights carry
  // theirs: --stats counts launches per layer and AdamW's updates group by layer from it.
  static void assignLayers(Graph& g) {
    for (Op* p : g.params()) {
      if (roleOf(*p) != Role::Weight || layerOf(*p) >= 0) continue;
      const std::string& name = p->attrStr("name");
      for (size_t from = 0; from < name.size();) {
        const size_t dot = std::min(name.find('.', from), name.size());
        const std::string part = name.substr(from, dot - from);
        if (dot < name.size() && !part.empty() && part.size() <= 6 &&
            part.find_first_not_of("0123456789") == std::string::npos) {
          setLayer(*p, std::stoll(part));
          break;
        }
        from = dot + 1;
      }
    }
  }

  // Each dropout(x, key) as x, and the key input gone once nothing reads it.
  static void withoutDropout(Graph& g) {
    for (const auto& op : g.ops)
      if (op->kind == OpKind::Dropout) g.replaceAllUses(op->result(), op->operands.at(0));
    // What the non-dropout ops and the outputs still read, before anything is erased.
    PtrSet<const Value*> read(g.outputs.begin(), g.outputs.end());
    for (const auto& op : g.ops)
      if (op->kind != OpKind::Dropout) read.insert(op->operands.begin(), op->operands.end());
    g.eraseIf([&](const Op* op) {
      return op->kind == OpKind::Dropout ||
             (op->kind == OpKind::Input && roleOf(*op) == Role::DropoutKey && !read.count(op->result()));
    });
  }

  void check(const Module& m) {
    if (m.funcs.size() != 1 || m.funcs[0]->name != "forward")
      fail("an imported model is one function, @forward (ids -> logits)");
    const Graph& g = *m.funcs[0];
    const Op* idsOp = nullptr;
    bool hasDropoutKey = false;
    for (const Op* in : g.inputs()) {
      const Role r = roleOf(*in);
      if (r == Role::TokenIds && !idsOp) {
        idsOp = in;
      } else if (r == Role::DropoutKey && !hasDropoutKey) {
        hasDropoutKey = true;
        if (in->result()->type != Type{DType::i64, {}})
          fail("@forward's dropout key '" + in->attrStr("name") + "' is " + in->result()->type.str() + ", expected i64[]");
      } else {
        fail("@forward takes one input, the token ids (role \"ids\"), and for dropout one key (role \"dropout_key\")");
      }
    }
    if (!idsOp) fail("@forward takes one input, the token ids (role \"ids\")");
    const Type& ids = idsOp->result()->type;
    if (ids.dtype != DType::i64 || ids.rank() != 2) fail("@forward's ids are " + ids.str() + ", expected i64[B,T]");
    batch_ = ids.shape[0];
    seq_ = ids.shape[1];
    if (g.outputs.size() != 1 || !g.updateOf(0).empty())
      fail("@forward returns one value, the logits");
    const Type& logits = g.outputs[0]->type;
    if (!isFloat(logits.dtype) || logits.rank() != 3 || logits.shape[0] != batch_ || logits.shape[1] != seq_)
      fail("@forward's logits are " + logits.str() + ", expected f32[" + std::to_string(batch_) + "," +
           std::to_string(seq_) + ",V]");
    vocab_ = logits.shape[2];
    for (Op* p : g.params()) {
      const Role r = roleOf(*p);
      if (r != Role::Weight && r != Role::Buffer)
        fail("param '" + p->attrStr("name") + "' has role \"" + std::string(roleName(r)) +
             "\"; an imported model's params are weights and buffers");
      if (p->result()->type.dtype != DType::f32)
        fail("param '" + p->attrStr("name") + "' is " + p->result()->type.str() + "; weights and buffers are f32");
      params_.push_back({p->attrStr("name"), p->result()->type.shape, r == Role::Buffer});
    }
  }

  void requireShape(int64_t batch, int64_t seq) const {
    if (batch != batch_ || seq != seq_)
      throw Error(path_ + " was exported for ids " + tokens().str() + ", not i64[" + std::to_string(batch) + "," +
                  std::to_string(seq) + "] (export it again with --batch " + std::to_string(batch) + " --seq " +
                  std::to_string(seq) + ")");
  }

  std::string path_;
  std::shared_ptr<const Module> module_;  // parsed and verified once; each trace clones it
  int64_t batch_ = 0, seq_ = 0, vocab_ = 0;
  std::vector<api::ParamInfo> params_;
};

}  // namespace

std::unique_ptr<api::Model> firModel(const std::string& path) { return std::make_unique<FirModel>(path); }

}  // namespace fusec::models
