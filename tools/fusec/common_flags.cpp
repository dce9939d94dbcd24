#include "tools/fusec/common_flags.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "frontend/models/fir_model.h"
#include "frontend/models/zoo_model.h"

namespace fusec::cli {
namespace {

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

void requireAtLeast(int64_t v, const std::string& flag, int64_t min) {
  if (v < min) throw Error(flag + " must be at least " + std::to_string(min) + ", got " + std::to_string(v));
}

void requireAtLeast(const std::vector<int64_t>& v, const std::string& flag, int64_t min) {
  if (v.empty()) throw Error(flag + " needs at least one value");
  for (int64_t x : v) requireAtLeast(x, flag, min);
}

void requireAtLeast(const std::vector<int>& v, const std::string& flag, int min) {
  requireAtLeast(std::vector<int64_t>(v.begin(), v.end()), flag, min);
}

void addDtypeFlag(CLI::App& cmd, std::string& dtype, const std::string& defaultText) {
  cmd.add_option("--dtype", dtype, "Precision: fp32 or bf16 (PyTorch autocast's policy) (default: " + defaultText + ")")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->type_name("DTYPE");
}

void addDtypeFlag(CLI::App& cmd, std::vector<std::string>& dtypes, const std::string& defaultText) {
  cmd.add_option("--dtype", dtypes, "Precisions, comma-separated: fp32, bf16 (autocast) (default: " + defaultText + ")")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->type_name("LIST");
}

CLI::Option* addSeedFlag(CLI::App& cmd, uint64_t& seed, const std::string& help, const std::string& name) {
  const CLI::Validator digits(
      [](std::string& text) -> std::string {
        uint64_t v = 0;
        const bool onlyDigits = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
        auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (!onlyDigits || err != std::errc() || end != text.data() + text.size())
          return "must be an integer in 0.." + std::to_string(UINT64_MAX) + ", got '" + text + "'";
        return "";
      },
      "UINT64");
  return cmd.add_option(name, seed, help)->type_name("S")->check(digits);
}

DType dtypeOf(const std::string& flag) { return flag == "bf16" ? DType::bf16 : DType::f32; }

void addAttentionFlag(CLI::App& cmd, std::string& attention, const std::string& defaultText) {
  cmd.add_option("--attention", attention,
                 "Attention lowering: fused (one flash-attention kernel) or naive (GEMMs around a softmax) (default: " +
                     defaultText + ")")
      ->check(CLI::IsMember({"fused", "naive"}))
      ->type_name("LOWERING");
}

AttentionLowering attentionOf(const std::string& flag) {
  return flag.empty() ? AttentionLowering::Default : parseAttentionLowering(flag);
}

void ModelOverrides::add(CLI::App& cmd) {
  cmd_ = &cmd;
  cmd.add_option("--fir", fir,
                 "An imported model instead of --model: a .fir with @forward (ids -> logits), as "
                 "`python3 -m fusec.export` writes it; its weights.safetensors beside it")
      ->type_name("FILE");
  cmd.add_option("--vocab", vocab, "Override the vocabulary size")->type_name("N");
  cmd.add_option("--d-model", dModel, "Override d_model")->type_name("N");
  cmd.add_option("--layers", layers, "Override the number of layers")->type_name("N");
  cmd.add_option("--heads", heads, "Override the number of heads")->type_name("N");
  cmd.add_option("--d-ff", dFF, "Override d_ff")->type_name("N");
  cmd.add_option("--context-length", contextLength,
                 "Override the context length, the longest sequence (RoPE has no learned positions: only its "
                 "tables grow)")
      ->type_name("N");
  cmd.add_option("--rope-theta", ropeTheta, "Override the RoPE theta")->type_name("X");
}

std::unique_ptr<api::Model> ModelOverrides::model(const std::string& name) const {
  if (!fir.empty()) {
    const CLI::Option* m = cmd_ ? cmd_->get_option_no_throw("--model") : nullptr;
    if (m && m->count()) throw Error("--fir and --model cannot be combined");
    if (any()) throw Error("the model overrides apply to the zoo models, not an imported .fir model");
    return models::firModel(fir);
  }
  const auto sizes = models::modelNames();
  if (std::find(sizes.begin(), sizes.end(), name) != sizes.end())
    return models::transformerModel(apply(models::namedConfig(name)));
  std::unique_ptr<api::Model> m = models::modelByName(name);  // throws for an unknown name
  if (any()) throw Error("the model overrides apply to the zoo models, not " + name);
  return m;
}

void resolveShape(const api::Model& model, int64_t& batch, bool batchGiven, int64_t& ctx, bool ctxGiven) {
  if (const auto [b, t] = model.onlyShape(); b > 0) {
    if (!batchGiven) batch = b;
    if (!ctxGiven) ctx = t;
  } else if (const int64_t c = model.contextLength(); c > 0) {
    if (!ctxGiven) ctx = std::min(ctx, c);  // tiny's context is 16
    if (ctx > c)
      throw Error("--ctx " + std::to_string(ctx) + " exceeds the context length " + std::to_string(c) + " of model '" +
                  model.name() + "' (--context-length raises it)");
  }
  requireAtLeast(batch, "--batch", 1);
  requireAtLeast(ctx, "--ctx", 1);
}

bool ModelOverrides::any() const { return vocab || dModel || layers || heads || dFF || contextLength || ropeTheta; }

models::ModelConfig ModelOverrides::apply(models::ModelConfig c) const {
  auto set = [](int64_t& field, const std::optional<int64_t>& v, const char* flag) {
    if (!v) return;
    requireAtLeast(*v, flag, 1);
    field = *v;
  };
  set(c.vocab, vocab, "--vocab");
  set(c.dModel, dModel, "--d-model");
  set(c.layers, layers, "--layers");
  set(c.heads, heads, "--heads");
  set(c.dFF, dFF, "--d-ff");
  set(c.ctx, contextLength, "--context-length");
  if (ropeTheta) {
    if (!(*ropeTheta > 0) || !std::isfinite(*ropeTheta))
      throw Error("--rope-theta must be a finite number above 0, got " + number(*ropeTheta));
    c.ropeTheta = *ropeTheta;
  }
  models::validate(c);
  return c;
}

void AdamWFlags::add(CLI::App& cmd) {
  cmd.add_option("--lr", lr, "AdamW learning rate (default: 1e-3)")->type_name("X");
  cmd.add_option("--betas", betas, "AdamW betas (default: 0.9,0.999)")->type_name("B1,B2");
  cmd.add_option("--eps", eps, "AdamW eps (default: 1e-8)")->type_name("X");
  cmd.add_option("--weight-decay", weightDecay, "AdamW weight decay (default: 0.01)")->type_name("X");
}

AdamWConfig AdamWFlags::config() const {
  if (!(lr > 0) || !std::isfinite(lr)) throw Error("--lr must be a finite number above 0, got " + number(lr));
  if (!(eps > 0) || !std::isfinite(eps)) throw Error("--eps must be a finite number above 0, got " + number(eps));
  if (!(weightDecay >= 0) || !std::isfinite(weightDecay))
    throw Error("--weight-decay must be a finite number of at least 0, got " + number(weightDecay));
  std::vector<double> b;
  for (size_t from = 0;;) {
    const size_t comma = betas.find(',', from);
    const std::string part = betas.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
    char* end = nullptr;
    const double x = std::strtod(part.c_str(), &end);
    if (part.empty() || *end || part.find_first_of(" \t") != std::string::npos)
      throw Error("--betas expects B1,B2 (two numbers), got '" + betas + "'");
    b.push_back(x);
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  if (b.size() != 2) throw Error("--betas expects B1,B2 (two numbers), got '" + betas + "'");
  for (double x : b)
    if (!(x >= 0 && x < 1)) throw Error("--betas must each be in [0, 1), got " + number(x));
  AdamWConfig c;
  c.lr = lr;
  c.beta1 = b[0];
  c.beta2 = b[1];
  c.eps = eps;
  c.weightDecay = weightDecay;
  return c;
}

}  // namespace fusec::cli
