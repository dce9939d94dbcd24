// `fusec compile --model NAME --program forward|train_step|attention|attention_backward`: traces a model program
// into IR, runs the program's own passes (passes/pipeline.h: decompose, autocast for bf16,
// autodiff and adamw for train_step, ...) and then --passes (default: the optimisation
// pipeline), and prints the module (or, with --stats, one JSON object describing it; with
// --print-dtypes, the dtype of every traced value after the program passes).
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "api/compile.h"
#include "frontend/models/attention.h"
#include "frontend/models/zoo_model.h"
#include "ir/printer.h"
#include "ir/roles.h"
#include "ir/verifier.h"
#include "passes/launch_stats.h"
#include "passes/memory_plan.h"
#include "passes/pipeline.h"
#include "tools/fusec/commands.h"
#include "tools/fusec/common_flags.h"
#include "tools/fusec/dtype_report.h"
#include "tools/fusec/emit_flags.h"
#include "tools/fusec/memory_timeline_files.h"
#include "support/atomic_file.h"

namespace fusec::cli {

namespace {

struct CompileArgs {
  std::string model, program = "forward", dtype = "fp32", passes, output = "-", attention;
  int64_t batch = 4, ctx = 256;
  bool stats = false, printDTypes = false;
  std::vector<std::string> memoryTimelines;
  CLI::Option* passesOpt = nullptr;
  CLI::Option* ctxOpt = nullptr;
  CLI::Option* batchOpt = nullptr;
  ModelOverrides overrides;  // unset: the named size's values
  std::optional<int64_t> dHead;
  AdamWFlags adamw;
  PassManagerOptions pm;
  EmitArgs emit;
  int64_t gpus = 1;
  double bucketMb = kDefaultBucketMb;
  bool shardOptimizer = false;
  std::string gradReduceDType = "fp32";
};

int64_t countOps(const Graph& g) {
  int64_t n = 0;
  for (const auto& op : g.ops) n += 1 + (op->body ? countOps(*op->body) : 0);
  return n;
}

void countByKind(const Graph& g, std::map<std::string, int64_t>& out) {
  for (const auto& op : g.ops) {
    ++out[std::string(op->info().name)];
    if (op->body) countByKind(*op->body, out);
  }
}

nlohmann::ordered_json stats(const CompileArgs& a, const api::Model& model, const Module& m, double buildMs,
                             double passMs) {
  nlohmann::ordered_json j;
  j["model"] = model.name();
  j["program"] = a.program;
  j["batch"] = a.batch;
  j["ctx"] = a.ctx;  // named as the flag is (--ctx)
  j["dtype"] = a.dtype;
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  for (const auto& [key, value] : model.config()) {
    if (value == double(int64_t(value))) config[key] = int64_t(value);  // sizes print as integers
    else config[key] = value;
  }
  j["config"] = config;
  int64_t parameters = 0;  // the model's weights (not optimizer state or cached casts)
  for (const api::ParamInfo& p : model.params()) parameters += Type{DType::f32, p.shape}.numel();
  j["parameters"] = parameters;
  int64_t ops = 0, params = 0, paramElements = 0, outputs = 0;
  nlohmann::ordered_json inputs = nlohmann::ordered_json::object();
  std::map<std::string, int64_t> byKind;
  for (const auto& g : m.funcs) {
    ops += countOps(*g);
    countByKind(*g, byKind);
    outputs += int64_t(g->outputs.size());
    for (Op* in : g->inputs()) inputs[in->attrStr("name")] = in->result()->type.str();
    for (Op* p : g->params()) {
      ++params;
      paramElements += p->result()->type.numel();
    }
  }
  j["ops"] = ops;
  // Launches: top-level GEMMs and kernels, attributed to layers (docs/pipeline.md).
  const LaunchStats ls = launchStats(m);
  j["kernels"] = ls.kernels;
  j["gemms"] = ls.gemms;
  j["launches"] = ls.launches();
  j["launches_per_layer"] = {{"forward", ls.launchesPerLayer.forward}, {"backward", ls.launchesPerLayer.backward}};
  j["launches_outside_layers"] = {{"forward", ls.outside.forward}, {"backward", ls.outside.backward}};
  // Memory: the arena plan of each function (programs have one), resident state beside it.
  MemoryPlanStats mem;
  for (const auto& g : m.funcs) {
    MemoryPlanStats s = planMemoryStats(*g);
    mem.plannedBytes += s.plannedBytes;
    mem.liveLowerBoundBytes += s.liveLowerBoundBytes;
    mem.residentBytes += s.residentBytes;
    mem.peakBytes += s.peakBytes;
  }
  j["planned_bytes"] = mem.plannedBytes;
  j["live_lower_bound_bytes"] = mem.liveLowerBoundBytes;
  j["resident_bytes"] = mem.residentBytes;
  j["peak_bytes"] = mem.peakBytes;
  if (a.program == "train_step") {  // what eager training holds at once: weights, grads, two moments
    j["params_grads_adam_bytes"] = 16 * int64_t(j["parameters"]);
    // AdamW's moments as this program holds them (a 1/N share each with --shard-optimizer).
    int64_t moments = 0;
    for (const auto& g : m.funcs)
      for (const auto& op : g->ops)
        if (op->kind == OpKind::Param && (roleOf(*op) == Role::ExpAvg || roleOf(*op) == Role::ExpAvgSq))
          moments += op->result()->type.numel() * dtypeBytes(op->result()->type.dtype);
    j["optimizer_state_bytes"] = moments;
  }
  j["inputs"] = inputs;
  j["param_tensors"] = params;
  j["param_elements"] = paramElements;
  j["outputs"] = outputs;
  j["ops_by_kind"] = byKind;
  j["trace_ms"] = buildMs;
  j["passes_ms"] = passMs;
  return j;
}

// A value of the model's configuration (model.config()), if it reports one.
std::optional<double> configValue(const api::Model& model, const std::string& key) {
  for (const auto& [k, v] : model.config())
    if (k == key) return v;
  return std::nullopt;
}

// The model whose program `a` asks for: the attention programs at --d-head, else at the head
// size of --model (its d_model / heads); any other program, the model --model names.
std::unique_ptr<api::Model> modelOf(const CompileArgs& a) {
  if (!models::isAttentionProgram(a.program)) return a.overrides.model(a.model);
  if (a.dHead) return models::attentionModel(*a.dHead);
  if (a.model.empty()) throw Error("compile --program " + a.program + " needs --d-head or --model");
  std::unique_ptr<api::Model> m = a.overrides.model(a.model);
  const std::optional<double> d = configValue(*m, "d_model"), h = configValue(*m, "heads");
  if (!d || !h) throw Error("compile --program " + a.program + " needs --d-head: model " + m->name() + " has no attention heads");
  return models::attentionModel(int64_t(*d / *h));
}

}  // namespace

Command addCompileCommand(CLI::App& app) {
  auto a = std::make_shared<CompileArgs>();
  std::string passes;
  for (auto& n : passNames()) passes += (passes.empty() ? "" : ", ") + n;
  CLI::App* cmd = app.add_subcommand("compile", "Trace a model program into IR, run passes on it and print it");
  cmd->add_option("--model", a->model, "Model: " + models::builtinModelNames())->type_name("NAME");
  cmd->add_option("--program", a->program, "Program to trace (default: forward)")
      ->check(CLI::IsMember(programNames()))
      ->type_name("PROGRAM");
  a->batchOpt = cmd->add_option("--batch", a->batch, "Batch size (default: 4, or an imported model's)")->type_name("B");
  a->ctxOpt = cmd->add_option("--ctx", a->ctx, "Sequence length, at most the model's context (default: 256, or the model's context if shorter)")
                  ->type_name("T");
  addDtypeFlag(*cmd, a->dtype, "fp32");
  cmd->add_flag("--stats", a->stats, "Print one JSON object of statistics instead of the IR");
  addAttentionFlag(*cmd, a->attention, kAttentionDefaultHelp);
  cmd->add_flag("--print-dtypes", a->printDTypes,
                "Print the dtype of the params, every named traced value and the gradients after the program "
                "passes, instead of the IR (the optimisation passes do not run)");
  a->overrides.add(*cmd);
  cmd->add_option("--d-head", a->dHead, "Head size of --program attention and attention_backward (default: the model's d_model/heads)")
      ->type_name("N");
  a->adamw.add(*cmd);
  cmd->add_option("--gpus", a->gpus,
                  "train_step: one rank's program of a data-parallel job on N GPUs (its gradients averaged over the "
                  "ranks by all_reduce buckets; what `fusec run --gpus N` runs on each GPU)")
      ->type_name("N");
  cmd->add_option("--bucket-mb", a->bucketMb, "--gpus: gradients reduced together, in MB (default " + std::to_string(kDefaultBucketMb) + ")")->type_name("MB");
  cmd->add_option("--grad-reduce-dtype", a->gradReduceDType, "--gpus: the gradients' dtype on the wire, fp32 (default) or bf16")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_flag("--shard-optimizer", a->shardOptimizer,
                "--gpus: each rank keeps the AdamW moments of its 1/N of every weight's rows (ZeRO-1)");
  a->passesOpt = cmd->add_option("--passes", a->passes,
                                  "Comma-separated pipeline to run after the program's own passes (default: " +
                                      defaultOptimizationPipeline() + "; empty: none); passes: " + passes)
                     ->expected(0, 1)
                     ->type_name("LIST");
  cmd->add_option("-o,--output", a->output, "Output file (default: stdout)")->type_name("FILE");
  cmd->add_option("--memory-timeline", a->memoryTimelines,
                  "Draw the memory plan: FILE.svg (each planned value a box over its live range, by offset; the "
                  "resident region, the peak and the layers marked) or FILE.json (the same data); repeatable")
      ->type_name("FILE");
  addPassManagerFlags(*cmd, a->pm);
  addEmitFlags(*cmd, a->emit, "ir");

  return [cmd, a]() -> int {
    if (!cmd->parsed()) return -1;
    using Clock = std::chrono::steady_clock;
    if (a->model.empty() && a->overrides.fir.empty() && !models::isAttentionProgram(a->program))
      throw Error("compile --program " + a->program + " needs --model or --fir");
    if (a->stats && a->printDTypes) throw Error("compile: --stats and --print-dtypes cannot be combined");

    std::unique_ptr<api::Model> model = modelOf(*a);
    resolveShape(*model, a->batch, a->batchOpt->count() > 0, a->ctx, a->ctxOpt->count() > 0);

    if (a->emit.emit != "ir" && a->emit.outDir.empty()) throw Error("--emit=" + a->emit.emit + " needs --out-dir");
    if (a->emit.emit != "ir" && (a->stats || a->printDTypes))
      throw Error("compile: --emit=" + a->emit.emit + " cannot be combined with --stats or --print-dtypes");
    Module m;
    m.sourceName = "<compile>";
    auto t0 = Clock::now();
    api::CompileOptions o;
    o.dtype = dtypeOf(a->dtype);
    o.adamw = a->adamw.config();
    o.attention = attentionOf(a->attention);
    o.device = api::Device::Cuda;  // the program the GPU runs (its attention lowering)
    o.passManager = a->pm;
    if (a->gpus < 1 || a->gpus > 1024) throw Error("--gpus must be in 1..1024, got " + std::to_string(a->gpus));
    if (!(a->bucketMb > 0) || a->bucketMb > 1e6) throw Error("--bucket-mb must be a positive size in MB");
    if (a->shardOptimizer && a->gpus < 2) throw Error("--shard-optimizer goes with --gpus N (N at least 2)");
    o.dataParallel = DataParallelConfig{a->gpus, int64_t(a->bucketMb * 1e6), a->shardOptimizer, dtypeOf(a->gradReduceDType)};
    if (a->printDTypes) o.passes = "";
    else if (a->passesOpt->count()) o.passes = a->passes;
    model->trace(m, api::Program{a->program, a->batch, a->ctx}, o);
    if (a->pm.verifyEach) verify(m);
    const TracedNames traced = recordTracedNames(*m.funcs.at(0));
    auto t1 = Clock::now();
    // One pass manager for the program passes and the rest (lowerProgram), so that
    // --print-ir-after-all, --dump-dir and --time-passes cover all of them.
    api::lowerProgram(m, a->program, o);
    auto t2 = Clock::now();
    if (!a->memoryTimelines.empty()) {
      if (a->printDTypes) throw Error("compile: --memory-timeline draws the planned program; drop --print-dtypes");
      const MemoryTimeline timeline = memoryTimeline(*m.funcs.at(0));
      const std::string title = model->name() + " " + a->program + " " + a->dtype + ", batch " + std::to_string(a->batch) +
                                ", ctx " + std::to_string(a->ctx) + ", " + attentionLoweringName(api::effectiveAttention(a->program, o)) +
                                " attention: memory plan";
      for (const std::string& path : a->memoryTimelines) writeMemoryTimeline(path, timeline, title);
    }

    if (emitKernels(a->emit, m)) return 0;
    std::optional<AtomicFile> file;
    std::ostream* out = &std::cout;
    if (a->output != "-") out = &file.emplace(a->output).stream();
    if (a->printDTypes) {
      printDTypes(*m.funcs.at(0), traced, *out);
    } else if (a->stats) {
      auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
      *out << stats(*a, *model, m, ms(t1 - t0), ms(t2 - t1)).dump(2) << "\n";
    } else {
      print(m, *out);
    }
    out->flush();
    if (file) file->commit();
    return 0;
  };
}

}  // namespace fusec::cli
