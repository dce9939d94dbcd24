// The CLI's one flag vocabulary: the flags several commands take are declared here once,
// with one spelling, one help text and one check, so `fusec compile`, `run`, `bench` and
// `profile` accept and refuse the same values with the same one-line message.
//   counts and sizes   "--FLAG must be at least N, got V" (requireAtLeast)
//   --dtype            fp32 | bf16 (PyTorch autocast's policy)
//   --attention        fused | naive
//   model overrides    --vocab --d-model --layers --heads --d-ff --context-length --rope-theta
//   AdamW              --lr --betas B1,B2 --eps --weight-decay
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/model.h"
#include "frontend/models/transformer.h"
#include "passes/adamw_update.h"
#include "passes/pipeline.h"

namespace fusec::cli {

// Throws Error("--FLAG must be at least MIN, got V").
void requireAtLeast(int64_t v, const std::string& flag, int64_t min);
// Each value (and at least one value: "--FLAG needs at least one value").
void requireAtLeast(const std::vector<int64_t>& v, const std::string& flag, int64_t min);
void requireAtLeast(const std::vector<int>& v, const std::string& flag, int min);

// --dtype: fp32 (the default) or bf16. `list`: a comma-separated sweep (bench).
void addDtypeFlag(CLI::App& cmd, std::string& dtype, const std::string& defaultText);
void addDtypeFlag(CLI::App& cmd, std::vector<std::string>& dtypes, const std::string& defaultText);
DType dtypeOf(const std::string& flag);  // "fp32" -> f32, "bf16" -> bf16

// --seed S: an integer in 0..2^64-1, written in decimal digits (CLI11 alone would take "-1" as
// 2^64-1 and silently clamp larger numbers).
CLI::Option* addSeedFlag(CLI::App& cmd, uint64_t& seed, const std::string& help, const std::string& name = "--seed");

// --attention: fused or naive; "" (not given) is the program's default.
void addAttentionFlag(CLI::App& cmd, std::string& attention, const std::string& defaultText);
AttentionLowering attentionOf(const std::string& flag);

// The overrides of a zoo model's configuration; unset ones keep the named size's values.
struct ModelOverrides {
  std::optional<int64_t> vocab, dModel, layers, heads, dFF, contextLength;
  std::optional<double> ropeTheta;
  std::string fir;  // --fir FILE: an imported model (frontend/models/fir_model.h) instead of --model
  // Declares the overrides and --fir on `cmd` (which declares --model itself).
  void add(CLI::App& cmd);
  // `base` with the overrides applied, each at least 1 (the theta above 0), then the whole
  // configuration validated (models::validate: heads divide d_model, ...).
  models::ModelConfig apply(models::ModelConfig base) const;
  bool any() const;
  // The model --model NAME names (models::modelByName) with these overrides applied; a model
  // that is not a zoo size takes none ("the model overrides apply to the zoo models, not toy").
  // With --fir, the imported model (--model and the overrides cannot be combined with it).
  std::unique_ptr<api::Model> model(const std::string& name) const;

 private:
  CLI::App* cmd_ = nullptr;
};

// The batch and sequence length (--batch, --ctx) a command traces `model` at. An imported
// model's own shape (Model::onlyShape) unless given (its trace refuses another); a --ctx not
// given is at most the model's context length. Then checked: each at least 1, and --ctx
// within the context ("--ctx N exceeds the context length C of model 'M' (--context-length
// raises it)").
void resolveShape(const api::Model& model, int64_t& batch, bool batchGiven, int64_t& ctx, bool ctxGiven);

// AdamW's hyperparameters (torch's defaults, weight decay 0.01).
struct AdamWFlags {
  double lr = 1e-3, eps = 1e-8, weightDecay = 0.01;
  std::string betas = "0.9,0.999";  // B1,B2: one token (CLI11's two-value options show "x 2" in help)
  void add(CLI::App& cmd);
  // Checked: lr and eps above 0, the betas in [0, 1), the weight decay at least 0.
  AdamWConfig config() const;
};

}  // namespace fusec::cli
