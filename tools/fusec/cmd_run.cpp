// `fusec run`: runs a model program on real tensors, safetensors in and out.
//
//   fusec run --program forward|train_step --weights W.safetensors --inputs I.safetensors
//             --out O.safetensors [--steps N] [--device cuda|cpu] [--no-cuda-graph] [--tf32] [--dtype fp32|bf16]
//             [--model NAME] [--vocab V --context-length C --d-model D --layers L --heads H --d-ff F
//              --rope-theta T] [--lr LR --betas B1,B2 --eps E --weight-decay WD] [--seed S]
//   fusec run --init-weights OUT.safetensors [--model NAME] [overrides] [--seed S]
//
// Weights are bound by their state_dict names and must match the model's shapes exactly
// (f32); a train_step output can be fed back as --weights (its `loss` is ignored). Inputs
// hold `ids` (and for train_step `targets`), i64 [B,T]; B and T come from `ids` (--model toy:
// `x` f32[B,in] and `targets` i64[B]). forward writes `logits`; train_step runs N AdamW
// steps (state starting at zero, step = 1..N) and writes `loss` (f32[N]) and every updated
// parameter. Without --weights the parameters come from the model's initialisation with
// --seed. The program is the one `fusec compile` builds: the trace plus the program passes
// (passes/pipeline.h); with --dtype bf16 that includes autocast and cache-weight-casts, whose
// bf16 weight copies start as bf16(W) and then follow the optimizer's updates.
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "frontend/init.h"
#include "frontend/models/toy.h"
#include "frontend/models/transformer.h"
#include "frontend/optim.h"
#include "frontend/program_state.h"
#include "frontend/safetensors.h"
#include "ir/interpreter.h"
#include "passes/pipeline.h"
#include "tools/fusec/commands.h"
#include "tools/fusec/common_flags.h"
#include "tools/fusec/device_run.h"

namespace fusec::cli {

namespace {

struct RunArgs {
  std::string program, weights, inputs, out, initWeights;
  int64_t steps = 1;
  std::string device, dtype = "fp32", model = "small", attention;
  uint64_t seed = 0;
  ModelOverrides overrides;  // applied only when given
  CLI::Option* oSteps = nullptr;
  AdamWFlags adamw;
  bool noCudaGraph = false, tf32 = false;
};

models::ModelConfig modelConfig(const RunArgs& a) { return a.overrides.apply(models::namedConfig(a.model)); }

// The model's parameters from `file`, checked name by name against the specs.
Bindings bindWeights(const std::string& file, const std::string& model, const std::vector<models::ParamSpec>& specs) {
  Bindings all = loadSafetensors(file);
  Bindings out;
  for (const auto& spec : specs) {
    Type want{DType::f32, spec.shape};
    auto it = all.find(spec.name);
    if (it == all.end())
      throw Error(file + ": missing tensor '" + spec.name + "' (expected " + want.str() + " for model " + model + ")");
    if (it->second.type != want)
      throw Error(file + ": tensor '" + spec.name + "' is " + it->second.type.str() + ", expected " + want.str());
    out.emplace(spec.name, std::move(it->second));
    all.erase(it);
  }
  all.erase("loss");  // a train_step output fed back as weights
  if (!all.empty())
    throw Error(file + ": unexpected tensor '" + all.begin()->first + "' (model " + model + " has no such parameter)");
  return out;
}

// Checks one token tensor: i64 [B,T] (matching `shape` when given) with ids in [0, vocab).
HostTensor tokenTensor(const std::string& file, Bindings& inputs, const std::string& name, const models::ModelConfig& cfg,
                       const Shape* shape) {
  auto it = inputs.find(name);
  if (it == inputs.end()) throw Error(file + ": missing tensor '" + name + "' (expected i64[B,T])");
  const HostTensor& t = it->second;
  std::string want = shape ? Type{DType::i64, *shape}.str() : "i64[B,T]";
  if (t.type.dtype != DType::i64 || t.type.rank() != 2 || (shape && t.type.shape != *shape))
    throw Error(file + ": tensor '" + name + "' is " + t.type.str() + ", expected " + want);
  int64_t B = t.type.shape[0], T = t.type.shape[1];
  if (B < 1 || T < 1) throw Error(file + ": tensor '" + name + "' is " + t.type.str() + ": B and T must be at least 1");
  if (T > cfg.ctx)
    throw Error(file + ": tensor '" + name + "' has sequence length " + std::to_string(T) +
                ", more than the model's context " + std::to_string(cfg.ctx));
  for (size_t k = 0; k < t.i.size(); ++k)
    if (t.i[k] < 0 || t.i[k] >= cfg.vocab)
      throw Error("token id " + std::to_string(t.i[k]) + " at " + name + "[" + std::to_string(int64_t(k) / T) + "," +
                  std::to_string(int64_t(k) % T) + "] is out of range for vocab " + std::to_string(cfg.vocab));
  return t;
}

SafetensorsMetadata metadataFor(const models::ModelConfig& c) {
  std::ostringstream cfg;
  cfg << "vocab=" << c.vocab << " ctx=" << c.ctx << " d_model=" << c.dModel << " layers=" << c.layers
      << " heads=" << c.heads << " d_ff=" << c.dFF << " rope_theta=" << c.ropeTheta;
  return {{"format", "pt"}, {"fusec_model", c.name}, {"fusec_config", cfg.str()}};
}

int runInit(const RunArgs& a) {
  if (a.model == "toy" && a.overrides.any()) throw Error("the model overrides apply to the zoo models, not toy");
  if (a.model == "toy") {
    Bindings w;
    for (const auto& spec : models::toyParameterSpecs(models::ToyConfig{})) w.emplace(spec.name, initParameter(spec, a.seed));
    saveSafetensors(a.initWeights, w, {{"format", "pt"}, {"fusec_model", "toy"}});
    return 0;
  }
  models::ModelConfig cfg = modelConfig(a);
  saveSafetensors(a.initWeights, initParameters(cfg, a.seed), metadataFor(cfg));
  return 0;
}

// The toy model's input `x`: f32[B, in].
HostTensor toyInput(const std::string& file, Bindings& inputs, const models::ToyConfig& c) {
  auto it = inputs.find("x");
  if (it == inputs.end()) throw Error(file + ": missing tensor 'x' (expected f32[B," + std::to_string(c.inFeatures) + "])");
  const HostTensor& t = it->second;
  if (t.type.dtype != DType::f32 || t.type.rank() != 2 || t.type.shape[1] != c.inFeatures || t.type.shape[0] < 1)
    throw Error(file + ": tensor 'x' is " + t.type.str() + ", expected f32[B," + std::to_string(c.inFeatures) + "]");
  return t;
}

int runProgram(RunArgs& a) {
  if (a.program.empty()) throw Error("run: --program forward|train_step is required (or --init-weights OUT)");
  if (a.inputs.empty()) throw Error("run: --inputs is required");
  if (a.out.empty()) throw Error("run: --out is required");
  // Without --device and without a GPU, say so once the run is done (an error stays one
  // line): a user who expected the GPU should not learn it from the time it takes.
  const bool fellBack = a.device.empty() && !cudaDevicePresent();
  if (a.device.empty()) a.device = fellBack ? "cpu" : "cuda";
  auto sayFellBack = [&] {
    if (fellBack) std::cerr << "fusec run: no CUDA device, ran on the CPU interpreter (--device cpu)\n";
  };
  if (a.device == "cuda") requireCudaDevice();
  if (a.device == "cpu" && (a.noCudaGraph || a.tf32)) throw Error("--no-cuda-graph and --tf32 apply to --device cuda only");
  if (a.program == "forward" && a.oSteps->count() && a.steps != 1) throw Error("--steps applies to --program train_step only");
  requireAtLeast(a.steps, "--steps", 1);
  const AdamWConfig adamw = a.adamw.config();
  const bool toy = a.model == "toy";
  if (toy && a.overrides.any()) throw Error("the model overrides apply to the zoo models, not toy");
  const bool train = a.program == "train_step";
  std::optional<models::ModelConfig> cfg;
  if (!toy) cfg = modelConfig(a);
  const models::ToyConfig toyCfg;
  const std::vector<models::ParamSpec> specs = toy ? models::toyParameterSpecs(toyCfg) : models::parameterSpecs(*cfg);

  // Everything is checked before the (slow) interpreter starts; the trace takes its shapes
  // from the inputs.
  Bindings inputs = loadSafetensors(a.inputs);
  Bindings env;
  Module module;
  if (toy) {
    HostTensor x = toyInput(a.inputs, inputs, toyCfg);
    const int64_t batch = x.type.shape[0];
    if (train) {
      auto it = inputs.find("targets");
      if (it == inputs.end()) throw Error(a.inputs + ": missing tensor 'targets' (expected i64[" + std::to_string(batch) + "])");
      if (it->second.type != Type{DType::i64, {batch}})
        throw Error(a.inputs + ": tensor 'targets' is " + it->second.type.str() + ", expected i64[" + std::to_string(batch) + "]");
      for (size_t k = 0; k < it->second.i.size(); ++k)
        if (it->second.i[k] < 0 || it->second.i[k] >= toyCfg.outFeatures)
          throw Error("target " + std::to_string(it->second.i[k]) + " at targets[" + std::to_string(k) +
                      "] is out of range for " + std::to_string(toyCfg.outFeatures) + " classes");
      env["targets"] = it->second;
      models::buildToyTrainLoss(module, toyCfg, batch);
    } else {
      models::buildToyForward(module, toyCfg, batch);
    }
    env["x"] = std::move(x);
  } else {
    HostTensor ids = tokenTensor(a.inputs, inputs, "ids", *cfg, nullptr);
    Shape bt = ids.type.shape;
    if (train) {
      env["targets"] = tokenTensor(a.inputs, inputs, "targets", *cfg, &bt);
      models::buildTrainLoss(module, *cfg, bt[0], bt[1]);
    } else {
      models::buildForward(module, *cfg, bt[0], bt[1]);
    }
    env["ids"] = std::move(ids);
  }
  Bindings weights;
  if (!a.weights.empty()) {
    weights = bindWeights(a.weights, toy ? "toy" : cfg->name, specs);
  } else {
    for (const auto& spec : specs) weights.emplace(spec.name, initParameter(spec, a.seed));
  }
  for (auto& [name, t] : weights) env[name] = std::move(t);

  // On the GPU the program is optimised (fused kernels over a memory plan) and its models'
  // attention is fused unless --attention=naive; the interpreter runs it as traced.
  api::CompileOptions o;
  o.dtype = dtypeOf(a.dtype);
  o.adamw = adamw;
  o.attention = attentionOf(a.attention);
  o.device = a.device == "cuda" ? api::Device::Cuda : api::Device::Cpu;
  if (o.device == api::Device::Cpu) o.passes = "";
  o.cudaGraph = !a.noCudaGraph;
  o.tf32 = a.tf32;
  api::lowerProgram(module, a.program, o);
  const Graph& g = *module.funcs.at(0);
  bindProgramState(g, env);
  const SafetensorsMetadata meta = toy ? SafetensorsMetadata{{"format", "pt"}, {"fusec_model", "toy"}} : metadataFor(*cfg);

  if (a.device == "cuda") {
    std::vector<float> losses;
    std::vector<HostTensor> outs = runOnDevice(module, env, train ? a.steps : 1, train ? &losses : nullptr, o);
    Bindings result;
    if (!train) {
      result["logits"] = std::move(outs.at(0));
    } else {
      HostTensor l = HostTensor::zeros(Type{DType::f32, {a.steps}});
      for (size_t k = 0; k < losses.size(); ++k) l.f[k] = losses[k];
      result["loss"] = std::move(l);
      for (auto& spec : specs) result[spec.name] = std::move(env.at(spec.name));
    }
    saveSafetensors(a.out, result, meta);
    return 0;
  }
  if (!train) {
    Bindings result;
    result["logits"] = std::move(interpret(g, env).at(0));
    saveSafetensors(a.out, result, meta);
    sayFellBack();
    return 0;
  }
  HostTensor losses = HostTensor::zeros(Type{DType::f32, {a.steps}});
  for (int64_t step = 1; step <= a.steps; ++step) {
    HostTensor t = HostTensor::zeros(Type{DType::f32, {}});
    t.f[0] = float(step);
    env["step"] = std::move(t);
    std::vector<HostTensor> outs = interpret(g, env);
    losses.f[size_t(step - 1)] = outs.at(0).f.at(0);
    for (size_t i = 0; i < outs.size(); ++i)
      if (!g.updateOf(i).empty()) env[g.updateOf(i)] = std::move(outs[i]);
  }
  Bindings result;
  result["loss"] = std::move(losses);
  for (auto& spec : specs) result[spec.name] = std::move(env.at(spec.name));
  saveSafetensors(a.out, result, meta);
  sayFellBack();
  return 0;
}

}  // namespace

Command addRunCommand(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Run a model program (forward or train_step) on the GPU or the CPU interpreter; tensors in and out as safetensors");
  cmd->add_option("--program", a->program, "forward or train_step")->check(CLI::IsMember({"forward", "train_step"}));
  cmd->add_option("--weights", a->weights, "Parameters by state_dict name (default: initialise with --seed)")
      ->type_name("FILE");
  cmd->add_option("--inputs", a->inputs, "Tensors 'ids' (and 'targets' for train_step), i64 [B,T]")->type_name("FILE");
  cmd->add_option("--out", a->out, "Output safetensors file")->type_name("FILE");
  cmd->add_option("--init-weights", a->initWeights, "Write freshly initialised weights of --model to FILE and exit")
      ->type_name("FILE");
  a->oSteps = cmd->add_option("--steps", a->steps, "train_step: number of AdamW steps (default 1)");
  cmd->add_option("--device", a->device, "cuda (the default when a GPU is present) or cpu (the interpreter)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_flag("--no-cuda-graph", a->noCudaGraph, "cuda: launch the step's kernels one by one instead of replaying a CUDA graph");
  cmd->add_flag("--tf32", a->tf32, "cuda: run f32 GEMMs on TF32 tensor cores (default: strict f32)");
  addDtypeFlag(*cmd, a->dtype, "fp32");
  addAttentionFlag(*cmd, a->attention, "fused");
  cmd->add_option("--model", a->model,
                  "small (default), medium, large, xl, 2.7B, tiny, toy (the CS336 mixed-precision ToyModel)");
  a->overrides.add(*cmd);
  a->adamw.add(*cmd);
  cmd->add_option("--seed", a->seed, "Seed for initialised weights (default 0)");
  return [cmd, a]() -> int {
    if (!cmd->parsed()) return -1;
    if (!a->initWeights.empty()) {
      if (!a->program.empty() || !a->weights.empty() || !a->inputs.empty() || !a->out.empty())
        throw Error("run: --init-weights cannot be combined with --program, --weights, --inputs or --out");
      return runInit(*a);
    }
    return runProgram(*a);
  };
}

}  // namespace fusec::cli
