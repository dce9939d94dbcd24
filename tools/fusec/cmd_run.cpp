// `fusec run`: runs a model program on real tensors, safetensors in and out.
//
//   fusec run --program forward|train_step --weights W.safetensors --inputs I.safetensors
//             --out O.safetensors [--steps N] [--device cuda|cpu] [--no-cuda-graph] [--tf32] [--dtype fp32|bf16]
//             [--model NAME] [--vocab V --context-length C --d-model D --layers L --heads H --d-ff F
//              --rope-theta T] [--lr LR --betas B1,B2 --eps E --weight-decay WD] [--seed S]
//   fusec run --init-weights OUT.safetensors [--model NAME] [overrides] [--seed S]
//
// Weights are bound by their state_dict names and must match the model's shapes exactly
// (f32); a train_step output can be fed back as --weights (its `loss` is ignored). The inputs
// are the model's (api::Model: its programFor sizes the program from them, validateInputs
// checks them): the transformers take `ids` (and for train_step `targets`), i64 [B,T]; the toy
// model `x` f32[B,in] and `targets` i64[B]. forward writes `logits`; train_step runs N AdamW
// steps (state starting at zero, step = 1..N) and writes `loss` (f32[N]) and every updated
// parameter. Without --weights the parameters come from the model's initialisation with
// --seed. The program is compiled by api::compile, as `fusec compile` builds it: the trace
// plus the program passes (passes/pipeline.h), and on the GPU the optimisation pipeline; with
// --dtype bf16 that includes autocast and cache-weight-casts, whose bf16 weight copies start
// as bf16(W) and then follow the optimizer's updates. No model is special-cased here.
#include <charconv>
#include <iostream>
#include <memory>

#include "api/compiled_program.h"
#include "frontend/models/zoo_model.h"
#include "frontend/program_state.h"
#include "frontend/safetensors.h"
#include "tools/fusec/commands.h"
#include "tools/fusec/common_flags.h"

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

// The model's parameters from `file`, checked name by name against its params().
Bindings bindWeights(const std::string& file, const api::Model& model) {
  Bindings all = loadSafetensors(file);
  Bindings out;
  for (const api::ParamInfo& p : model.params()) {
    Type want{DType::f32, p.shape};
    auto it = all.find(p.name);
    if (it == all.end())
      throw Error(file + ": missing tensor '" + p.name + "' (expected " + want.str() + " for model " + model.name() + ")");
    if (it->second.type != want)
      throw Error(file + ": tensor '" + p.name + "' is " + it->second.type.str() + ", expected " + want.str());
    out.emplace(p.name, std::move(it->second));
    all.erase(it);
  }
  all.erase("loss");  // a train_step output fed back as weights
  if (!all.empty())
    throw Error(file + ": unexpected tensor '" + all.begin()->first + "' (model " + model.name() + " has no such parameter)");
  return out;
}

// The shortest decimal that reads back as `v` (10000, 1e-05).
std::string shortest(double v) {
  char buf[32];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

// What the files `run` writes say about the model: its name and configuration.
SafetensorsMetadata metadataOf(const api::Model& m) {
  SafetensorsMetadata meta{{"format", "pt"}, {"fusec_model", m.name()}};
  std::string cfg;
  for (const auto& [key, value] : m.config()) cfg += (cfg.empty() ? "" : " ") + key + "=" + shortest(value);
  if (!cfg.empty()) meta["fusec_config"] = cfg;
  return meta;
}

// The inputs of one call, checked against the model before anything is compiled; errors name
// the file.
api::Program checkedProgram(const api::Model& model, const std::string& program, const std::string& file,
                            const Bindings& inputs) {
  try {
    api::Program p = model.programFor(program, inputs);
    model.validateInputs(p, inputs);
    return p;
  } catch (const Error& e) {
    throw Error(file + ": " + e.what());
  }
}

int runProgram(RunArgs& a, const api::Model& model) {
  if (a.program.empty()) throw Error("run: --program forward|train_step is required (or --init-weights OUT)");
  if (a.inputs.empty()) throw Error("run: --inputs is required");
  if (a.out.empty()) throw Error("run: --out is required");
  // Without --device and without a GPU, say so once the run is done (an error stays one
  // line): a user who expected the GPU should not learn it from the time it takes.
  const bool fellBack = a.device.empty() && !api::cudaDevicePresent();
  if (a.device.empty()) a.device = fellBack ? "cpu" : "cuda";
  if (a.device == "cpu" && (a.noCudaGraph || a.tf32)) throw Error("--no-cuda-graph and --tf32 apply to --device cuda only");
  if (a.program == "forward" && a.oSteps->count() && a.steps != 1) throw Error("--steps applies to --program train_step only");
  requireAtLeast(a.steps, "--steps", 1);

  // Everything is checked before the (slow) compile and run; the program takes its shape
  // from the inputs.
  api::CompileOptions o;
  o.dtype = dtypeOf(a.dtype);
  o.adamw = a.adamw.config();
  o.attention = attentionOf(a.attention);
  o.device = a.device == "cuda" ? api::Device::Cuda : api::Device::Cpu;
  if (o.device == api::Device::Cuda) api::requireCudaDevice();
  // The interpreter runs the program as traced and differentiated; the GPU runs it optimised
  // (fused kernels over a memory plan, attention fused unless --attention=naive).
  if (o.device == api::Device::Cpu) o.passes = "";
  o.cudaGraph = !a.noCudaGraph;
  o.tf32 = a.tf32;
  const Bindings inputs = loadSafetensors(a.inputs);
  const api::Program p = checkedProgram(model, a.program, a.inputs, inputs);
  Bindings weights = a.weights.empty() ? model.initialWeights(a.seed) : bindWeights(a.weights, model);

  api::CompiledProgram program = api::compile(model, p, o);
  // The state the program passes added (AdamW's moments, bf16 weight copies) starts from
  // the weights, as it does on every path (frontend/program_state.h).
  bindProgramState(program.graph(), weights);
  program.bind(std::move(weights));
  Bindings result;
  HostTensor losses = HostTensor::zeros(Type{DType::f32, {a.steps}});
  for (int64_t step = 0; step < (a.program == "train_step" ? a.steps : 1); ++step) {
    std::vector<HostTensor> outs = program.step(inputs);
    if (a.program == "train_step") losses.f[size_t(step)] = outs.at(0).f.at(0);
    else result["logits"] = std::move(outs.at(0));
  }
  if (a.program == "train_step") {
    result["loss"] = std::move(losses);
    for (const api::ParamInfo& w : model.params()) result[w.name] = program.read(w.name);
  }
  saveSafetensors(a.out, result, metadataOf(model));
  if (fellBack) std::cerr << "fusec run: no CUDA device, ran on the CPU interpreter (--device cpu)\n";
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
  cmd->add_option("--model", a->model, "Model (default: small): " + models::builtinModelNames())->type_name("NAME");
  a->overrides.add(*cmd);
  a->adamw.add(*cmd);
  cmd->add_option("--seed", a->seed, "Seed for initialised weights (default 0)");
  return [cmd, a]() -> int {
    if (!cmd->parsed()) return -1;
    if (!a->initWeights.empty()) {
      if (!a->program.empty() || !a->weights.empty() || !a->inputs.empty() || !a->out.empty())
        throw Error("run: --init-weights cannot be combined with --program, --weights, --inputs or --out");
      std::unique_ptr<api::Model> model = a->overrides.model(a->model);
      saveSafetensors(a->initWeights, model->initialWeights(a->seed), metadataOf(*model));
      return 0;
    }
    return runProgram(*a, *a->overrides.model(a->model));
  };
}

}  // namespace fusec::cli
