// `fusec run`: runs a model program on real tensors, safetensors in and out.
//
//   fusec run --program forward|train_step --weights W.safetensors
//             (--inputs I.safetensors | --data TOKENS [--data-dtype uint16|int32] | --random-inputs)
//             [--batch B --ctx T] --out O.safetensors [--steps N] [--device cuda|cpu] [--no-cuda-graph] [--tf32] [--dtype fp32|bf16]
//             [--model NAME] [--vocab V --context-length C --d-model D --layers L --heads H --d-ff F
//              --rope-theta T] [--lr LR --betas B1,B2 --eps E --weight-decay WD] [--seed S]
//             [--checkpoint DIR [--checkpoint-every K]] [--resume DIR] [--gpus N [--bucket-mb MB] [--shard-optimizer]]
//   fusec run --init-weights OUT.safetensors [--model NAME] [overrides] [--seed S]
//
// Weights are bound by their state_dict names and must match the model's shapes exactly
// (f32); a train_step output can be fed back as --weights (its `loss` is ignored). The inputs
// are the model's (api::Model: its programFor sizes the program from them, validateInputs
// checks them): the transformers take `ids` (and for train_step `targets`), i64 [B,T]; the toy
// model `x` f32[B,in] and `targets` i64[B]. forward writes `logits`; train_step runs N AdamW
// steps (state starting at zero, step = 1..N) and writes `loss` (f32[N]) and every updated
// parameter. Without --weights the parameters come from the model's initialisation with
// --seed. A train_step run can write a checkpoint every K steps (and after its last) and be
// resumed from one (frontend/training_checkpoint.h): the resumed run's losses and weights
// are those of the run never interrupted, bit for bit. The program is compiled by
// api::compile, as `fusec compile` builds it: the trace plus the program passes
// (passes/pipeline.h), and on the GPU the optimisation pipeline; with --dtype bf16 that
// includes autocast and cache-weight-casts, whose bf16 weight copies start as bf16(W) and then
// follow the optimizer's updates. No model is special-cased here.
//
// With --gpus N (or under torchrun: tools/fusec/job.h) the train_step runs data-parallel: N
// ranks, one a GPU, each on --batch sequences of the step's N x --batch (drawn once from
// --seed, as one GPU with batch N x --batch would draw them, then split in rank order; an
// --inputs file holds the whole N x --batch), gradients and loss averaged over the ranks inside
// the step (passes/data_parallel.h). The losses printed and written are the job's; rank 0
// writes --out and the checkpoints, which every rank can resume from (the same N only).
#include <algorithm>
#include <chrono>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "api/compiled_program.h"
#include "frontend/models/zoo_model.h"
#include "frontend/program_state.h"
#include "frontend/safetensors.h"
#include "frontend/token_data.h"
#include "frontend/training_checkpoint.h"
#include "ir/roles.h"
#include "tools/fusec/commands.h"
#include "tools/fusec/common_flags.h"
#include "tools/fusec/cpu_estimate.h"
#include "tools/fusec/job.h"
#ifdef FUSEC_HAVE_NCCL
#include "runtime/collectives.h"
#endif
#include "bench/trace.h"
#include "support/atomic_file.h"
#include "support/env.h"
#ifdef FUSEC_HAVE_CUDA
#include "runtime/kernel_activity.h"
#endif

namespace fusec::cli {

namespace {

struct RunArgs {
  std::string program, weights, inputs, out, initWeights, data, dataDType = "uint16";
  bool randomInputs = false;
  int64_t steps = 1, batch = 4, ctx = 256;
  CLI::Option *oBatch = nullptr, *oCtx = nullptr;
  std::string device, dtype = "fp32", model = "small", attention;
  uint64_t seed = 0, dropoutSeed = 0;
  CLI::Option* oDropoutSeed = nullptr;
  ModelOverrides overrides;  // applied only when given
  CLI::Option* oSteps = nullptr;
  AdamWFlags adamw;
  bool noCudaGraph = false, tf32 = false, noDropout = false;
  bool allowNonfinite = false;
  std::string checkpoint, resume;
  int64_t checkpointEvery = 100;
  CLI::Option* oCheckpointEvery = nullptr;
  CLI::Option *oCheckpoint = nullptr, *oResume = nullptr;
  int64_t gpus = 0;  // 0: not given
  double bucketMb = kDefaultBucketMb;
  CLI::Option* oBucketMb = nullptr;
  bool shardOptimizer = false;
  std::string gradReduceDType = "fp32";
  CLI::Option* oGradReduce = nullptr;
  int rank = 0, ranks = 1;  // this process's place in the job (jobRole)
  std::string timeline;     // --timeline FILE.json: the last step's kernels (rank 0)
  std::string report;       // --report FILE.json: step times and overlap, for `fusec bench --gpus`
};

// Rank `rank`'s rows of each tensor of a batch of `ranks` x b rows (the leading dim).
Bindings rowsOfRank(const Bindings& all, int rank, int ranks) {
  if (ranks == 1) return all;
  Bindings out;
  for (const auto& [name, t] : all) {
    if (t.type.rank() == 0 || t.type.shape[0] % ranks != 0)
      throw Error("'" + name + "' is " + t.type.str() + ": its first dimension (the batch) must split evenly over " +
                  std::to_string(ranks) + " GPUs");
    HostTensor part;
    part.type = t.type;
    part.type.shape[0] /= ranks;
    const size_t n = part.size(), from = size_t(rank) * n;
    if (isFloat(t.type.dtype)) part.f.assign(t.f.begin() + std::ptrdiff_t(from), t.f.begin() + std::ptrdiff_t(from + n));
    else part.i.assign(t.i.begin() + std::ptrdiff_t(from), t.i.begin() + std::ptrdiff_t(from + n));
    out[name] = std::move(part);
  }
  return out;
}

// Throws Error (naming `file`) unless `all` holds every one of the model's params() as f32 of
// its shape: a weights file, or a checkpoint (which holds AdamW's moments besides).
void requireModelWeights(const Bindings& all, const std::string& file, const api::Model& model) {
  for (const api::ParamInfo& p : model.params()) {
    Type want{DType::f32, p.shape};
    auto it = all.find(p.name);
    if (it == all.end())
      throw Error(file + ": missing tensor '" + p.name + "' (expected " + want.str() + " for model " + model.name() + ")");
    if (it->second.type != want)
      throw Error(file + ": tensor '" + p.name + "' is " + it->second.type.str() + ", expected " + want.str());
  }
}

// The model's parameters from `file`, checked name by name against its params().
Bindings bindWeights(const std::string& file, const api::Model& model) {
  Bindings all = loadSafetensors(file);
  requireModelWeights(all, file, model);
  Bindings out;
  for (const api::ParamInfo& p : model.params()) out.insert(all.extract(p.name));
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
// the file. `fromFile`: the user's --inputs file, whose tensor names are checked too (a batch
// fusec draws itself holds only the program's, so the per-step check skips that work).
api::Program checkedProgram(const api::Model& model, const std::string& program, const std::string& file,
                            const Bindings& inputs, bool fromFile) {
  try {
    api::Program p = model.programFor(program, inputs);
    model.validateInputs(p, inputs);
    // Every tensor is one a program of the model takes (their example inputs name them; one
    // file may feed both forward and train_step): an extra one is a mistake, as in a weights file.
    std::set<std::string> wanted;
    if (fromFile)
      for (const std::string& prog : model.programs())
        if (prog == p.name || prog == "train_step")
          for (const auto& [n, t] : model.exampleInputs(api::Program{prog, p.batch, p.seq}, 0)) wanted.insert(n);
    for (const auto& [name, t] : inputs)
      if (fromFile && !wanted.count(name)) {
        std::string names;
        for (const std::string& n : wanted) names += (names.empty() ? "" : ", ") + n;
        throw Error("unexpected tensor '" + name + "' (the model's programs take " + names + ")");
      }
    return p;
  } catch (const Error& e) {
    throw Error(file + ": " + e.what());
  }
}

// Where each step's inputs come from: one file (the same every step), or a batch drawn per
// step from a token file (--data) or at random (--random-inputs).
class StepInputs {
 public:
  StepInputs(RunArgs& a, const api::Model& model) : a_(a), model_(model), rng_(a.seed ^ 0x5eed'da7a'0000'0001ull) {
    const int given = !a.inputs.empty() + !a.data.empty() + a.randomInputs;
    if (given != 1) throw Error("run: give the inputs one way: --inputs FILE, --data TOKENS or --random-inputs");
    if (!a.inputs.empty()) {
      if (a.oBatch->count() || a.oCtx->count())
        throw Error("run: --batch and --ctx go with --data or --random-inputs; --inputs gives its own shape");
      fixed_ = rowsOfRank(loadSafetensors(a.inputs), a.rank, a.ranks);
      label_ = a.inputs;
      drawn_ = false;
      return;
    }
    resolveShape(model, a.batch, a.oBatch->count() > 0, a.ctx, a.oCtx->count() > 0);
    if (!a.data.empty()) {
      tokens_ = std::make_unique<TokenFile>(a.data, parseTokenDType(a.dataDType));
      label_ = a.data;
    } else {
      label_ = "--random-inputs";
    }
  }
  bool drawn() const { return drawn_; }
  const std::string& label() const { return label_; }
  // Where the inputs come from, as a run's identity (a checkpoint's): the flag and its value.
  void identify(RunIdentity& run) const {
    if (!drawn_) {
      run["--inputs"] = std::filesystem::absolute(a_.inputs).lexically_normal().string();
      return;
    }
    if (tokens_)  // its size too: a corpus appended to samples from another range
      run["--data"] = std::filesystem::absolute(a_.data).lexically_normal().string() + " (" + a_.dataDType + ", " +
                      std::to_string(tokens_->size()) + " tokens)";
    else
      run["--random-inputs"] = "on";
    run["--batch"] = std::to_string(a_.batch);
    run["--ctx"] = std::to_string(a_.ctx);
  }
  // The data position: the --data sampler's random-number state after the batches drawn so
  // far ("" for the other sources, whose step-th batch depends on the step alone).
  std::string dataState() const {
    if (!tokens_) return "";
    std::ostringstream s;
    s << rng_;
    return s.str();
  }
  void restoreDataState(const std::string& state, const std::string& what) {
    if (!tokens_) return;
    // std::mt19937_64's text: its 312 state words, then its position in them (at most 312).
    // An all-zero state draws zeros for ever (the sampler would never find a window), and
    // another count or position is not a state the sampler ever wrote.
    std::istringstream words(state);
    std::vector<uint64_t> w;
    for (uint64_t x; words >> x;) w.push_back(x);
    const bool whole = words.eof() && w.size() == std::mt19937_64::state_size + 1 &&
                       w.back() <= std::mt19937_64::state_size &&
                       std::any_of(w.begin(), w.end() - 1, [](uint64_t x) { return x != 0; });
    std::istringstream s(state);
    if (!whole || !(s >> rng_)) throw Error(what + ": no readable --data position in the checkpoint");
  }
  // The inputs of step `step` (0-based). Drawn ones are checked by the model, as the file's
  // are (checkedProgram: a token outside the vocabulary is one line naming the source).
  Bindings at(int64_t step) {
    if (!drawn()) return fixed_;
    const int64_t all = a_.batch * a_.ranks;  // the job's batch, split in rank order
    if (tokens_) return rowsOfRank(tokens_->sample(all, a_.ctx, rng_), a_.rank, a_.ranks);
    return rowsOfRank(model_.exampleInputs(api::Program{a_.program, all, a_.ctx}, a_.seed + 1 + uint64_t(step)), a_.rank,
                      a_.ranks);
  }

 private:
  RunArgs& a_;
  const api::Model& model_;
  std::mt19937_64 rng_;
  Bindings fixed_;
  std::unique_ptr<TokenFile> tokens_;
  std::string label_;
  bool drawn_ = true;
};

// What makes a resumed run the run its checkpoint came from: the flags that change its
// losses. The device and --steps are not among them (a run may be resumed on another device,
// or for more steps).
RunIdentity runIdentity(const RunArgs& a, const api::Model& model, const StepInputs& source) {
  RunIdentity run;
  const SafetensorsMetadata meta = metadataOf(model);
  run["--model"] = meta.at("fusec_model") + (meta.count("fusec_config") ? " (" + meta.at("fusec_config") + ")" : "");
  run["--dtype"] = a.dtype;
  run["--attention"] = a.attention.empty() ? "fused" : a.attention;  // run's default
  if (a.tf32) run["--tf32"] = "on";
  run["--seed"] = std::to_string(a.seed);
  if (a.oDropoutSeed && a.oDropoutSeed->count()) run["--dropout-seed"] = std::to_string(a.dropoutSeed);
  if (a.noDropout) run["--no-dropout"] = "on";
  run["--lr"] = shortest(a.adamw.lr);
  const AdamWConfig adamw = a.adamw.config();
  run["--betas"] = shortest(adamw.beta1) + "," + shortest(adamw.beta2);
  run["--eps"] = shortest(a.adamw.eps);
  run["--weight-decay"] = shortest(a.adamw.weightDecay);
  if (a.ranks > 1) run["--gpus"] = std::to_string(a.ranks);  // a checkpoint resumes with its own N only
  if (a.shardOptimizer) run["--shard-optimizer"] = "on";
  if (a.gradReduceDType != "fp32") run["--grad-reduce-dtype"] = a.gradReduceDType;
  source.identify(run);
  return run;
}

// The program's trained state, to checkpoint: every param but the bf16 weight copies (which
// bindProgramState rebuilds exactly from their weights).
Bindings trainedState(api::CompiledProgram& program) {
  Bindings state;
  for (Op* p : program.graph().params())
    if (roleOf(*p) != Role::WeightCopy) state[p->attrStr("name")] = program.read(p->attrStr("name"));
  return state;
}

// A resumed program's state: the checkpoint must hold every param of `g` but the copies, of
// its type, and nothing else.
void requireStateFits(const Graph& g, const Bindings& state, const std::string& file) {
  std::set<std::string> wanted;
  for (Op* p : g.params()) {
    if (roleOf(*p) == Role::WeightCopy) continue;
    const std::string& name = p->attrStr("name");
    wanted.insert(name);
    auto it = state.find(name);
    if (it == state.end()) throw Error(file + ": missing tensor '" + name + "' (expected " + p->result()->type.str() + ")");
    if (it->second.type != p->result()->type)
      throw Error(file + ": tensor '" + name + "' is " + it->second.type.str() + ", expected " + p->result()->type.str());
  }
  for (const auto& [name, t] : state)
    if (!wanted.count(name)) throw Error(file + ": unexpected tensor '" + name + "' (the program has no such param)");
}

// What every rank must agree on: the run's identity and the flags that shape its program or
// its number of steps (a rank with fewer steps would leave the others waiting).
std::string jobFingerprint(const RunArgs& a, const RunIdentity& identity) {
  std::string f = std::string("fusec ") + FUSEC_VERSION + "\nprogram " + a.program + "\nsteps " + std::to_string(a.steps) +
                  "\nbucket-mb " + shortest(a.bucketMb) + "\ncheckpoint-every " + std::to_string(a.checkpointEvery) +
                  "\nresume " + (a.resume.empty() ? "no" : "yes") + "\n";
  for (const auto& [k, v] : identity) f += k + " " + v + "\n";
  return f;
}

int runProgram(RunArgs& a, const api::Model& model);

// A rank's run: the job's failure reaches the other ranks as one line naming this one.
int runRank(RunArgs& a, const api::Model& model) {
  if (a.oBucketMb->count() && a.gpus <= 1 && !envSet("WORLD_SIZE"))
    throw Error("run: --bucket-mb goes with --gpus N");
  if (a.shardOptimizer && a.gpus <= 1 && !envSet("WORLD_SIZE"))
    throw Error("run: --shard-optimizer goes with --gpus N");
  if (a.oGradReduce->count() && a.gpus <= 1 && !envSet("WORLD_SIZE"))
    throw Error("run: --grad-reduce-dtype goes with --gpus N");
  // Each rank holds only its rows of the AdamW moments: a checkpoint would need them all.
  if (a.shardOptimizer && (!a.checkpoint.empty() || !a.resume.empty()))
    throw Error("run: --shard-optimizer does not write or resume checkpoints yet (each rank holds only its share of "
                "the AdamW moments); drop --checkpoint/--resume or --shard-optimizer");
  if (!(a.bucketMb > 0) || a.bucketMb > 1e6) throw Error("run: --bucket-mb must be a positive size in MB");
  const JobRole role = jobRole(a.gpus);
  if (role.launcher) {
    if (a.program != "train_step") throw Error("run: --gpus applies to --program train_step");
    if (a.device == "cpu") throw Error("run: --gpus runs on GPUs; drop --device cpu");
    return launchWorkers(role.ranks);
  }
  a.rank = role.rank;
  a.ranks = role.ranks;
  return runProgram(a, model);
}

int runProgram(RunArgs& a, const api::Model& model) {
  if (a.program.empty()) throw Error("run: --program forward|train_step is required (or --init-weights OUT)");
  if (a.oCheckpoint->count() && a.checkpoint.empty()) throw Error("run: --checkpoint needs a directory, got ''");
  if (a.oResume->count() && a.resume.empty()) throw Error("run: --resume needs a directory, got ''");
  if (a.ranks > 1 && a.program != "train_step") throw Error("run: --gpus applies to --program train_step");
  if (a.ranks > 1 && a.device == "cpu") throw Error("run: --gpus runs on GPUs; drop --device cpu");
  if (a.out.empty() && a.program != "train_step") throw Error("run: --out is required");
  // Without --device and without a GPU, say so once the run is done (an error stays one
  // line): a user who expected the GPU should not learn it from the time it takes.
  if (a.ranks > 1 && a.device.empty()) a.device = "cuda";  // a rank of a job never falls back to the CPU
  const bool fellBack = a.device.empty() && !api::cudaDevicePresent();
  if (a.device.empty()) a.device = fellBack ? "cpu" : "cuda";
  if (a.device == "cpu" && (a.noCudaGraph || a.tf32)) throw Error("--no-cuda-graph and --tf32 apply to --device cuda only");
  if (a.program == "forward" && a.oSteps->count() && a.steps != 1) throw Error("--steps applies to --program train_step only");
  requireAtLeast(a.steps, "--steps", 1);
  if (a.program != "train_step" && (!a.checkpoint.empty() || !a.resume.empty()))
    throw Error("run: --checkpoint and --resume apply to --program train_step only");
  if (a.oCheckpointEvery->count() && a.checkpoint.empty()) throw Error("run: --checkpoint-every goes with --checkpoint DIR");
  requireAtLeast(a.checkpointEvery, "--checkpoint-every", 1);
  if (!a.resume.empty() && !a.weights.empty())
    throw Error("run: --resume takes the weights from its checkpoint; drop --weights");
  if (!a.checkpoint.empty()) requireCheckpointDir(a.checkpoint);  // before the training, not K steps into it
  if (!a.out.empty() && a.rank == 0) requireWritableFile(a.out, "--out");  // likewise: a run's result must have a place
  if (!a.timeline.empty()) {
    if (a.program != "train_step" || a.device == "cpu") throw Error("run: --timeline applies to train_step on the GPU");
    if (a.steps < 3) throw Error("run: --timeline traces the last step, which must be a CUDA-graph replay: --steps 3 or more");
    const std::filesystem::path dir = std::filesystem::absolute(a.timeline).parent_path();
    if (!std::filesystem::is_directory(dir)) throw Error("run: --timeline " + a.timeline + ": no directory " + dir.string());
  }
  if (!a.report.empty()) {
    if (a.program != "train_step") throw Error("run: --report applies to train_step");
    if (a.rank == 0) requireWritableFile(a.report, "--report");
  }
  // One run a checkpoint directory (rank 0 writes for a job).
  std::optional<CheckpointDirLock> lock;
  if (!a.checkpoint.empty() && a.rank == 0) lock.emplace(a.checkpoint);

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
  // Dropout: the ranks of a job draw different masks for their rows (the same seed on every
  // rank would repeat one rank's masks N times).
  o.dropout = !a.noDropout;
  o.dropoutSeed = (a.oDropoutSeed && a.oDropoutSeed->count() ? a.dropoutSeed : a.seed) ^
                  (uint64_t(a.rank) * 0x9E3779B97F4A7C15ull);
  StepInputs source(a, model);
  const RunIdentity identity = runIdentity(a, model, source);
  // A rank joins its job before the compile (the program's collectives run on the job's
  // communicator) and after its flags and files were checked: a rank that fails those stops
  // before it holds the others up.
  std::shared_ptr<rt::Communicator> comm;
  const bool leader = a.rank == 0;
  if (a.ranks > 1) {
    o.dataParallel.ranks = a.ranks;
    o.dataParallel.bucketBytes = int64_t(a.bucketMb * 1e6);
    o.dataParallel.shardOptimizer = a.shardOptimizer;
    o.dataParallel.reduceDType = dtypeOf(a.gradReduceDType);
  }
  std::set<std::string> buffers;  // a mask may hold -inf
  for (const api::ParamInfo& p : model.params())
    if (p.buffer) buffers.insert(p.name);

  // A resumed run starts from its checkpoint: its weights and moments, its step, its losses
  // and its data position. It is checked here, before the compile: the same run, a step
  // within --steps, the model's weights all there.
  TrainingCheckpoint resumed;
  const std::string resumedFile = a.resume.empty() ? "" : checkpointPath(a.resume);
  if (!a.resume.empty()) {
    resumed = loadCheckpoint(a.resume);
    requireSameRun(resumed, identity, a.resume);
    if (resumed.step > a.steps)
      throw Error("run: --resume " + a.resume + " is at step " + std::to_string(resumed.step) + ", past --steps " +
                  std::to_string(a.steps));
    requireModelWeights(resumed.state, resumedFile, model);
    if (!a.allowNonfinite) requireFinite(resumed.state, resumedFile, buffers);
    source.restoreDataState(resumed.dataState, resumedFile);
  }
  const int64_t first = resumed.step;  // 0 unless resumed
  const int64_t steps = a.program == "train_step" ? a.steps : 1;
  HostTensor losses = HostTensor::zeros(Type{DType::f32, {a.steps}});
  std::copy(resumed.losses.begin(), resumed.losses.end(), losses.f.begin());
  Bindings result;
  if (!a.resume.empty() && first == steps) {
    // Nothing left to run: the checkpoint is the run's end. --out as the run wrote it.
    std::cout << "run: " << resumedFile << " is at step " << first << " of " << steps << " already; nothing to run\n";
    result["loss"] = std::move(losses);
    for (const api::ParamInfo& w : model.params()) result[w.name] = resumed.state.at(w.name);
    if (!a.out.empty()) saveSafetensors(a.out, result, metadataOf(model));
    return 0;
  }

  Bindings inputs = source.at(first);
  const api::Program p = checkedProgram(model, a.program, source.label(), inputs, !source.drawn());
  // Weights from a file (--weights, or an imported model's weights.safetensors) are read and
  // checked before the compile; they must be finite: a NaN there makes every loss NaN,
  // silently. The zoo's initialisation (finite) comes after it, so that a model that does
  // not fit on the device says so (api::compile checks the memory first) before seconds of
  // host work on weights it would not use.
  const bool fromFile = a.resume.empty() && (!a.weights.empty() || !a.overrides.fir.empty());
  Bindings weights;
  if (fromFile) {
    weights = a.weights.empty() ? model.initialWeights(a.seed) : bindWeights(a.weights, model);
    if (!a.allowNonfinite)
      requireFinite(weights, a.weights.empty() ? a.overrides.fir + "'s weights.safetensors" : a.weights, buffers);
  }

  if (a.ranks > 1) {
    comm = joinJob(JobRole{false, a.ranks, a.rank, jobFromEnvironment()}, jobFingerprint(a, identity));
    o.communicator = comm.get();
  }
  // CUPTI before the executable exists, so that its records cover the step's graph.
#ifdef FUSEC_HAVE_CUDA
  std::optional<rt::KernelActivity> activity;
  if (!a.timeline.empty() && leader) activity.emplace();
  std::vector<rt::KernelSpan> traced;
#endif
  api::CompiledProgram program = api::compile(model, p, o);
  // On the CPU, what a step will take, before it is taken (and a step that cannot fit, refused).
  if (o.device == api::Device::Cpu)
    if (const std::string line = describeCpuStep(program.graph()); !line.empty()) std::cout << line << std::endl;
  if (!a.resume.empty()) {
    requireStateFits(program.graph(), resumed.state, resumedFile);
    weights = std::move(resumed.state);
    program.resumeAt(first);  // AdamW's step counter goes on from the checkpoint's
    std::cout << "run: resuming " << resumedFile << " at step " << first + 1 << " of " << steps << std::endl;
  } else if (!fromFile) {
    weights = model.initialWeights(a.seed);
  }
  // The state the program passes added (AdamW's moments, bf16 weight copies) starts from
  // the weights, as it does on every path (frontend/program_state.h).
  bindProgramState(program.graph(), weights, a.rank);
  program.bind(std::move(weights));
  // The first non-finite loss stops the run. Its step updated nothing (AdamW skips a step
  // whose loss is not finite: passes/adamw_update.h), so the weights read below are those
  // of the last good step, and --out keeps the losses of the good steps with them. The loss
  // is on the host already (the one copy, and sync, of each step): the check costs nothing.
  std::string stopped;
  int64_t good = first;
  std::vector<double> stepMs;  // wall time of each step, the loss's copy to the host included
  for (int64_t step = first; step < steps; ++step) {
    const auto started = std::chrono::steady_clock::now();
    if (step > first && source.drawn()) {
      inputs = source.at(step);
      checkedProgram(model, a.program, source.label(), inputs, false);
    }
#ifdef FUSEC_HAVE_CUDA
    const bool tracing = activity && step == steps - 1;
    if (tracing) {
      activity->start();
      activity->take();  // nothing from before
    }
    std::vector<HostTensor> outs = program.step(inputs);  // its loss on the host: the step has ended
    if (tracing) {
      traced = activity->take();
      activity->stop();
    }
#else
    std::vector<HostTensor> outs = program.step(inputs);
#endif
    stepMs.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
    if (a.program == "train_step") {
      const float loss = outs.at(0).f.at(0);
      if (!std::isfinite(loss) && !a.allowNonfinite) {
        stopped = "run: step " + std::to_string(step + 1) + " of " + std::to_string(steps) + ": the loss is " +
                  (std::isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf") + "; stopped with the weights of step " +
                  std::to_string(step) + (a.out.empty() ? "" : " (written to " + a.out + ")");
        break;
      }
      losses.f[size_t(step)] = loss;
      ++good;
      // A batch drawn per step is a training run: its loss as it goes.
      if (source.drawn() && leader) std::cout << "step " << step + 1 << "/" << steps << "  loss " << loss << std::endl;
      if (leader && !a.checkpoint.empty() && (good % a.checkpointEvery == 0 || good == steps)) {
        // A checkpoint that cannot be written (a full disk) stops the run, as a bad loss does:
        // --out still gets the steps done.
        try {
          saveCheckpoint(a.checkpoint, TrainingCheckpoint{good, std::vector<float>(losses.f.begin(), losses.f.begin() + good),
                                                          trainedState(program), identity, source.dataState()});
        } catch (const Error& e) {
          stopped = "run: step " + std::to_string(good) + " of " + std::to_string(steps) + ": " + e.what() +
                    "; stopped" + (a.out.empty() ? "" : " (the steps done are written to " + a.out + ")");
          break;
        }
      }
    } else {
      result["logits"] = std::move(outs.at(0));
    }
  }
  if (a.program == "train_step") {
    losses.type.shape = {good};
    losses.f.resize(size_t(good));
    result["loss"] = std::move(losses);
    for (const api::ParamInfo& w : model.params()) result[w.name] = program.read(w.name);
  }
  if (!a.out.empty() && leader) saveSafetensors(a.out, result, metadataOf(model));
  if (fellBack) std::cerr << "fusec run: no CUDA device, ran on the CPU interpreter (--device cpu)\n";
  // The steady step time, after the first steps (compile, GEMM tuning, graph capture).
  if (leader && a.program == "train_step" && stepMs.size() >= 5) {
    std::vector<double> steady(stepMs.begin() + 2, stepMs.end());
    std::sort(steady.begin(), steady.end());
    const double median = steady[steady.size() / 2];
    std::cout << "run: median step " << median << " ms over steps " << first + 3 << ".." << first + int64_t(stepMs.size())
              << (a.ranks > 1 ? " on " + std::to_string(a.ranks) + " GPUs" : "") << ", "
              << int64_t(double(p.batch * a.ranks * p.seq) / (median / 1e3)) << " tokens/s" << std::endl;
  }
  nlohmann::ordered_json report;
  if (leader && !a.report.empty()) {
    report["model"] = model.name();
    report["dtype"] = a.dtype;
    report["batch"] = p.batch;  // per GPU
    report["ctx"] = p.seq;
    report["gpus"] = a.ranks;
    report["first_step"] = first + 1;
    report["steps_ms"] = stepMs;  // wall time of each step, its loss on the host
    report["traced_last_step"] = !a.timeline.empty();
    report["stopped"] = stopped;
  }
#ifdef FUSEC_HAVE_CUDA
  if (!traced.empty()) {
    const std::string where = "step " + std::to_string(steps) + (a.ranks > 1 ? " on rank 0 of " + std::to_string(a.ranks) : "");
    writeFileAtomically(a.timeline, bench::stepTimelineTrace(model.name() + " " + where, traced));
    const rt::StepOverlap o = rt::stepOverlap(traced);
    std::cout << "run: " << where << ": " << bench::overlapSummary(o) << " (" << a.timeline << ")" << std::endl;
    if (leader && !a.report.empty())
      report["overlap"] = {{"step_ms", o.stepMs}, {"compute_ms", o.computeMs}, {"comm_ms", o.commMs},
                           {"exposed_comm_ms", o.exposedCommMs}};
  }
#endif
  if (leader && !a.report.empty()) writeFileAtomically(a.report, report.dump(1) + "\n");
#ifdef FUSEC_HAVE_NCCL
  if (comm) {
    if (!stopped.empty()) comm->fail(stopped);
    else comm->finish();
  }
#endif
  if (!stopped.empty()) throw Error(stopped);
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
  cmd->add_option("--inputs", a->inputs, "Tensors 'ids' (and 'targets' for train_step), i64 [B,T], the same every step")
      ->type_name("FILE");
  cmd->add_option("--data", a->data,
                  "A flat token file (CS336's np.memmap format): each step draws --batch windows of --ctx tokens "
                  "(targets: the next token) at random offsets, with --seed")
      ->type_name("TOKENS");
  cmd->add_option("--data-dtype", a->dataDType, "The tokens of --data: uint16 (default) or int32")
      ->check(CLI::IsMember({"uint16", "int32"}));
  cmd->add_option("--timeline", a->timeline,
                  "train_step on the GPU: record the last step's kernels as the device ran them (CUPTI; rank 0 of a "
                  "job) into a Chrome trace file, compute and collectives on their own tracks, and print how much "
                  "of the collectives' time the compute did not hide")
      ->type_name("FILE.json");
  cmd->add_option("--report", a->report,
                  "train_step: write the run's step times (and with --timeline the last step's compute, collective "
                  "and exposed collective time) to a JSON file, rank 0 of a job (what `fusec bench --gpus` reads)")
      ->type_name("FILE.json");
  cmd->add_flag("--random-inputs", a->randomInputs, "Uniformly random ids and targets, a fresh batch each step (quick tries)");
  a->oBatch = cmd->add_option("--batch", a->batch, "--data, --random-inputs: sequences per step (default 4)");
  a->oCtx = cmd->add_option("--ctx", a->ctx, "--data, --random-inputs: tokens per sequence (default 256, at most the model's context)");
  cmd->add_option("--out", a->out, "Output safetensors file (train_step: optional; the loss of each step drawn from --data or "
                  "--random-inputs is printed)")->type_name("FILE");
  cmd->add_option("--init-weights", a->initWeights, "Write freshly initialised weights of --model to FILE and exit")
      ->type_name("FILE");
  a->oSteps = cmd->add_option("--steps", a->steps, "train_step: number of AdamW steps (default 1)");
  cmd->add_option("--device", a->device, "cuda (the default when a GPU is present) or cpu (the interpreter)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_flag("--no-cuda-graph", a->noCudaGraph, "cuda: launch the step's kernels one by one instead of replaying a CUDA graph");
  cmd->add_flag("--tf32", a->tf32, "cuda: run f32 GEMMs on TF32 tensor cores (default: strict f32)");
  addDtypeFlag(*cmd, a->dtype, "fp32");
  addAttentionFlag(*cmd, a->attention, kAttentionDefaultHelp);
  cmd->add_option("--model", a->model, "Model (default: small): " + models::builtinModelNames())->type_name("NAME");
  a->overrides.add(*cmd);
  a->adamw.add(*cmd);
  addSeedFlag(*cmd, a->seed, "Seed for initialised weights (default 0)");
  a->oDropoutSeed = addSeedFlag(*cmd, a->dropoutSeed,
                                "train_step: seed of the dropout masks of a model that has dropout (default --seed); "
                                "step k's masks are a function of it and k, so a resumed run draws the same",
                                "--dropout-seed");
  cmd->add_flag("--no-dropout", a->noDropout,
                "train_step: train without the model's dropout (as in eval mode; the export's own check uses it)");
  a->oCheckpoint = cmd->add_option("--checkpoint", a->checkpoint,
                  "train_step: write a checkpoint (weights, AdamW moments, step, losses, data position) into DIR "
                  "every --checkpoint-every steps and after the last, atomically")
      ->type_name("DIR");
  a->oCheckpointEvery =
      cmd->add_option("--checkpoint-every", a->checkpointEvery, "train_step: steps between checkpoints (default 100)")
          ->type_name("K");
  a->oResume = cmd->add_option("--resume", a->resume,
                  "train_step: go on from DIR's checkpoint up to --steps, as if the run had never stopped (the same "
                  "flags as the run that wrote it)")
      ->type_name("DIR");
  cmd->add_option("--gpus", a->gpus,
                  "train_step: run data-parallel on N GPUs of this host (one worker a GPU; --batch is per GPU; under "
                  "torchrun, WORLD_SIZE gives N)")
      ->type_name("N");
  a->oBucketMb = cmd->add_option("--bucket-mb", a->bucketMb,
                                 "--gpus: gradients reduced together, in MB (default " + std::to_string(kDefaultBucketMb) + "; a bucket's reduction overlaps "
                                 "the backward of the next)")
                     ->type_name("MB");
  a->oGradReduce = cmd->add_option("--grad-reduce-dtype", a->gradReduceDType,
                                   "--gpus: the gradients' dtype on the wire, fp32 (default: equal to one GPU with the "
                                   "whole batch, to fp32 rounding) or bf16 (half the bytes)")
                       ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_flag("--shard-optimizer", a->shardOptimizer,
                "--gpus: each GPU keeps the AdamW moments of its 1/N of every weight's rows (ZeRO-1: gradients "
                "reduce-scattered, weights all-gathered after the update)");
  cmd->add_flag("--allow-nonfinite", a->allowNonfinite,
                "Load weights holding NaN or Inf, and go on past a non-finite loss (whose step still updates nothing; default: refuse, and stop)");
  return [cmd, a]() -> int {
    if (!cmd->parsed()) return -1;
    if (!a->initWeights.empty()) {
      if (!a->program.empty() || !a->weights.empty() || !a->inputs.empty() || !a->out.empty() || !a->data.empty() ||
          a->randomInputs)
        throw Error("run: --init-weights cannot be combined with --program, --weights, --inputs, --data, "
                    "--random-inputs or --out");
      std::unique_ptr<api::Model> model = a->overrides.model(a->model);
      const Bindings weights = model->initialWeights(a->seed);
      saveSafetensors(a->initWeights, weights, metadataOf(*model));
      int64_t count = 0;
      for (const auto& [name, t] : weights) count += int64_t(t.size());
      // Success says what it wrote (silence read as nothing done).
      std::cout << "run: wrote " << a->initWeights << ": " << weights.size() << " tensors, " << count << " parameters of "
                << model->name() << " (seed " << a->seed << ")" << std::endl;
      return 0;
    }
    return runRank(*a, *a->overrides.model(a->model));
  };
}

}  // namespace fusec::cli
