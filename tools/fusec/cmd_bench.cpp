// `fusec bench`: eager LibTorch against compiled fusec on the CS336 model sizes, every
// (model, batch, ctx, dtype, pass, warm-up) a row per implementation, timed with CUDA events
// after warm-up, with the GEMM and copy ceilings measured in the same run (MFU). Rows that do
// not fit print OOM and the sweep goes on; a progress line per row goes to stderr.
// `--vs-torch` adds bench/torch_compile_ref.py's torch.compile rows to the same table.
// The eager rows run in fusec-eager (tools/fusec/eager_worker.h): fusec links no LibTorch.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "bench/sweep.h"
#include "frontend/models/fir_model.h"
#include "frontend/models/transformer.h"
#include "tools/fusec/bench_gpus.h"
#include "tools/fusec/commands.h"
#include "tools/fusec/common_flags.h"
#include "tools/fusec/script_rows.h"
#include "tools/fusec/write_output.h"
#ifdef FUSEC_HAVE_CUDA
#include "bench/ceilings.h"
#include "bench/compiled_runner.h"
#include "runtime/device.h"
#endif
#include "tools/fusec/eager_worker.h"

namespace fusec::cli {

namespace {

struct BenchArgs {
  std::vector<std::string> models = {"small"}, dtypes = {"fp32", "bf16"}, passes = {"forward", "fwd_bwd", "step"};
  std::vector<std::string> impls = {"eager", "compiled"};
  std::vector<int64_t> ctxs = {256}, batches = {4};
  std::vector<int64_t> gpus;  // --gpus: data-parallel rows (tools/fusec/bench_gpus.h)
  std::vector<int> warmups = {5};
  int iters = 10;
  uint64_t seed = 0;
  std::string format = "table", out = "-", torchScript, attention, fir;
  bool vsTorch = false;
  bool shardOptimizer = false;  // --gpus: the jobs' ZeRO-1
};

std::vector<bench::BenchModel> zooModels(const std::vector<std::string>& names) {
  std::vector<bench::BenchModel> out;
  for (const auto& n : names) {
    if (n == "all") {
      for (const char* s : {"small", "medium", "large", "xl", "2.7B"}) out.push_back(bench::zooBenchModel(models::namedConfig(s)));
    } else {
      out.push_back(bench::zooBenchModel(models::namedConfig(n)));
    }
  }
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

template <class T>
std::string joinNumbers(const std::vector<T>& v) {
  std::vector<std::string> s;
  for (T x : v) s.push_back(std::to_string(x));
  return join(s);
}

// The torch.compile rows: runs the reference script on the same grid and parses its JSON
// rows. Its own eager rows are not asked for: speedups are against LibTorch eager here.
std::vector<bench::BenchRow> torchCompileRows(const BenchArgs& a) {
  const std::string args = "--model " + join(a.models) + " --ctx " + joinNumbers(a.ctxs) + " --batch " +
                           joinNumbers(a.batches) + " --dtype " + join(a.dtypes) + " --passes " + join(a.passes) +
                           " --warmup " + joinNumbers(a.warmups) + " --iters " + std::to_string(a.iters) +
                           " --impl torch.compile,torch.compile-ro --format json" +
                           " --fusec " + shellQuoted(selfExecutable());
  std::vector<bench::BenchRow> rows;
  for (const auto& line : scriptRows(a.torchScript, args)) rows.push_back(bench::parseJsonRow(line));
  return rows;
}

// PyTorch DDP + torch.compile rows beside `bench --gpus` (bench/torch_ddp_ref.py, next to
// the torch.compile script): same models, per-GPU batches, dtypes and GPU counts.
std::vector<bench::BenchRow> torchDdpRows(const BenchArgs& a) {
  const std::string dir = a.torchScript.substr(0, a.torchScript.find_last_of('/') + 1);
  const std::string args = "--model " + join(a.models) + " --ctx " + joinNumbers(a.ctxs) + " --batch " +
                           joinNumbers(a.batches) + " --dtype " + join(a.dtypes) + " --gpus " + joinNumbers(a.gpus) +
                           " --warmup " + std::to_string(a.warmups.at(0)) + " --iters " + std::to_string(a.iters) +
                           " --seed " + std::to_string(a.seed) + " --fusec " + shellQuoted(selfExecutable());
  std::vector<bench::BenchRow> rows;
  for (const auto& line : scriptRows(dir + "torch_ddp_ref.py", args)) rows.push_back(bench::parseJsonRow(line));
  return rows;
}

// An imported model's PyTorch rows (eager, torch.compile, torch.compile-ro, as asked): its own
// nn.Module, rebuilt from the exporter's record beside the .fir by bench/torch_module_ref.py,
// at the shape it was exported at.
std::vector<bench::BenchRow> torchModuleRows(const BenchArgs& a, const bench::BenchModel& model,
                                             const std::vector<std::string>& impls) {
  const std::string dir = a.torchScript.substr(0, a.torchScript.find_last_of('/') + 1);
  const std::string args = "--fir " + shellQuoted(a.fir) + " --dtype " + join(a.dtypes) + " --passes " +
                           join(a.passes) + " --warmup " + joinNumbers(a.warmups) + " --iters " +
                           std::to_string(a.iters) + " --seed " + std::to_string(a.seed) + " --impl " + join(impls) +
                           " --name " + shellQuoted(model.name()) + " --forward-flops-per-token " +
                           std::to_string(model.flopsPerToken(a.ctxs.at(0), bench::BenchPass::Forward));
  std::vector<bench::BenchRow> rows;
  for (const auto& line : scriptRows(dir + "torch_module_ref.py", args)) rows.push_back(bench::parseJsonRow(line));
  return rows;
}

// --fir: the model's one shape; --batch and --ctx, when given, must be it.
bench::BenchModel importedModel(BenchArgs& a, bool batchGiven, bool ctxGiven) {
  bench::BenchModel m = bench::importedBenchModel(models::firModel(a.fir));
  const auto [b, t] = m.model->onlyShape();
  if ((batchGiven && a.batches != std::vector<int64_t>{b}) || (ctxGiven && a.ctxs != std::vector<int64_t>{t}))
    throw Error(a.fir + " was exported for ids i64[" + std::to_string(b) + "," + std::to_string(t) +
                "]: bench it at that shape (omit --batch and --ctx), or export it again with --batch and --seq");
  a.batches = {b}, a.ctxs = {t};
  return m;
}

}  // namespace

Command addBenchCommand(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
#ifdef FUSEC_TORCH_REF
  a->torchScript = FUSEC_TORCH_REF;
#endif
  std::string known;
  for (auto& n : models::modelNames()) known += n + ", ";
  CLI::App* cmd = app.add_subcommand("bench", "Time eager LibTorch against compiled fusec on the GPU");
  CLI::Option* oModel = cmd->add_option("--model", a->models, "Models, comma-separated: " + known + "all (small..2.7B); default small")
      ->delimiter(',')
      ->type_name("LIST");
  cmd->add_option("--fir", a->fir,
                  "An imported model (DIR/model.fir from python3 -m fusec.export) instead of --model, at its exported "
                  "shape; its eager and torch.compile rows time its PyTorch module (bench/torch_module_ref.py)")
      ->type_name("FILE");
  CLI::Option* oCtx = cmd->add_option("--ctx", a->ctxs, "Sequence lengths (default: 256)")->delimiter(',')->type_name("LIST");
  CLI::Option* oBatch = cmd->add_option("--batch", a->batches, "Batch sizes (default: 4)")->delimiter(',')->type_name("LIST");
  addAttentionFlag(*cmd, a->attention, std::string(kAttentionDefaultHelp) + "; the compiled side");
  addDtypeFlag(*cmd, a->dtypes, "fp32,bf16");
  cmd->add_option("--passes", a->passes, "forward, fwd_bwd, step (default: all three)")
      ->delimiter(',')
      ->check(CLI::IsMember({"forward", "fwd_bwd", "step"}))
      ->type_name("LIST");
  cmd->add_option("--impl", a->impls, "Implementations: eager, compiled (default: both)")
      ->delimiter(',')
      ->check(CLI::IsMember({"eager", "compiled"}))
      ->type_name("LIST");
  cmd->add_option("--warmup", a->warmups, "Warm-up calls before timing; a list sweeps them, e.g. 0,1,5 (default: 5)")
      ->delimiter(',')
      ->type_name("LIST");
  cmd->add_option("--iters", a->iters, "Timed iterations per row (default: 10)")->type_name("N");
  addSeedFlag(*cmd, a->seed, "Seed of the weights and tokens (default: 0)");
  cmd->add_option("--format", a->format, "table (default), json (one object per row) or csv")
      ->check(CLI::IsMember({"table", "json", "csv"}))
      ->type_name("FORMAT");
  cmd->add_option("--out", a->out, "Output file (default: stdout)")->type_name("FILE");
  cmd->add_option("--gpus", a->gpus,
                  "Data parallel: GPU counts, ascending, e.g. 1,2,4. Each row is a training step (--passes step) of a "
                  "job of that many GPUs, --batch sequences on each (weak scaling), run as `fusec run --gpus N`; rows "
                  "add the scaling efficiency against 1 GPU and the collectives' exposed time")
      ->delimiter(',')
      ->type_name("LIST");
  cmd->add_flag("--shard-optimizer", a->shardOptimizer,
                "With --gpus: the jobs of 2 GPUs or more shard AdamW's state (`fusec run --shard-optimizer`; the "
                "1-GPU row, their baseline, has nothing to shard)");
  cmd->add_flag("--vs-torch", a->vsTorch,
                "Add torch.compile rows from bench/torch_compile_ref.py (python3 with torch); with --gpus, PyTorch "
                "DDP + torch.compile rows from bench/torch_ddp_ref.py");
  cmd->add_option("--torch-script", a->torchScript, "Path of torch_compile_ref.py (default: the source tree's)")
      ->type_name("FILE");
  Command attention = addBenchAttention(*cmd);

  CLI::Option* oPasses = cmd->get_option("--passes");
  CLI::Option* oImpl = cmd->get_option("--impl");
  CLI::Option* oWarmup = cmd->get_option("--warmup");
  return [cmd, a, attention, oModel, oCtx, oBatch, oPasses, oImpl, oWarmup]() -> int {
    if (!cmd->parsed()) return -1;
    if (int rc = attention(); rc >= 0) return rc;
    if (a->shardOptimizer && a->gpus.empty()) throw Error("bench: --shard-optimizer goes with --gpus LIST");
    if (!a->gpus.empty()) {
      // Data parallel: one pass (the training step), one implementation (compiled), the zoo.
      if (!a->fir.empty()) throw Error("--gpus runs the zoo's models (--model), not --fir");
      if (oPasses->count() && a->passes != std::vector<std::string>{"step"})
        throw Error("--gpus times the training step only: drop --passes or give --passes step");
      if (oImpl->count() && a->impls != std::vector<std::string>{"compiled"})
        throw Error("--gpus runs fusec's compiled step only (--vs-torch adds PyTorch DDP's): drop --impl");
      if (oWarmup->count() && a->warmups.size() != 1) throw Error("--gpus takes one --warmup");
      requireAtLeast(a->ctxs, "--ctx", 1);
      requireAtLeast(a->batches, "--batch", 1);
      requireAtLeast(a->warmups, "--warmup", 0);
      requireAtLeast(a->iters, "--iters", 1);
      if (a->vsTorch && a->torchScript.empty()) throw Error("--vs-torch needs --torch-script");
      const bench::Format format = bench::parseFormat(a->format);
      DataParallelSweep sweep;
      sweep.models = zooModels(a->models);
      sweep.ctxs = a->ctxs, sweep.batches = a->batches, sweep.gpus = a->gpus, sweep.dtypes = a->dtypes;
      sweep.warmup = a->warmups.at(0), sweep.iters = a->iters, sweep.seed = a->seed, sweep.attention = a->attention;
      sweep.shardOptimizer = a->shardOptimizer;
      for (const auto& m : sweep.models)
        for (int64_t ctx : a->ctxs)
          if (ctx > m.contextLength())
            throw Error("--ctx " + std::to_string(ctx) + " exceeds the context length " +
                        std::to_string(m.contextLength()) + " of model '" + m.name() + "'");
#ifndef FUSEC_HAVE_CUDA
      (void)format;
      throw Error("no CUDA device (fusec was built without the CUDA toolkit)");
#else
      checkGpuCounts(a->gpus, 1 << 20);  // their order, before the device is asked
      if (rt::deviceCount() == 0) throw Error("no CUDA device");
      checkGpuCounts(a->gpus, rt::deviceCount());
      std::string line;
      {
        // The ceilings (MFU) on GPU 0, before any job; this process then leaves the GPUs to them.
        const rt::DeviceInfo device = rt::openDevice();
        std::cerr << "device: " << device.name << "; measuring the GEMM and copy ceilings\n";
        const bench::Ceilings ceil = bench::measureCeilings();
        sweep.bf16Tflops = ceil.bf16Tflops, sweep.f32Tflops = ceil.f32Tflops;
        char text[256];
        std::snprintf(text, sizeof text, "# %s (%d GPUs used at most): GEMM bf16 %.1f TFLOP/s, f32 %.1f TFLOP/s; copy %.0f GB/s",
                      device.name.c_str(), int(a->gpus.back()), ceil.bf16Tflops, ceil.f32Tflops, ceil.copyGBps);
        line = text;
      }
      std::vector<bench::BenchRow> rows = dataParallelRows(sweep, std::cerr);
      if (a->vsTorch)
        for (auto& r : torchDdpRows(*a)) {
          r.peakTflops = r.dtype == "bf16" ? sweep.bf16Tflops : sweep.f32Tflops;
          rows.push_back(std::move(r));
        }
      std::string text = bench::formatRows(rows, format);
      if (format == bench::Format::Table) text = line + "\n" + text;
      writeOutput(a->out, text);
      return 0;
#endif
    }
    // Everything the flags can get wrong fails before the device is touched.
    bench::SweepConfig sweep;
    std::vector<std::string> scriptImpls;  // --fir: the PyTorch module's rows
    if (!a->fir.empty()) {
      if (oModel->count()) throw Error("--fir and --model cannot be combined");
      sweep.models = {importedModel(*a, oBatch->count() > 0, oCtx->count() > 0)};
      // Its eager rows are the PyTorch module's (the script's), not LibTorch's.
      std::vector<std::string> own;
      for (const auto& impl : a->impls) (impl == "eager" ? scriptImpls : own).push_back(impl);
      if (a->vsTorch) scriptImpls.insert(scriptImpls.end(), {"torch.compile", "torch.compile-ro"});
      a->impls = own;
      if (!scriptImpls.empty() && a->torchScript.empty()) throw Error("--fir's eager and torch.compile rows need --torch-script");
    } else {
      sweep.models = zooModels(a->models);
    }
    requireAtLeast(a->ctxs, "--ctx", 1);
    requireAtLeast(a->batches, "--batch", 1);
    requireAtLeast(a->warmups, "--warmup", 0);
    requireAtLeast(a->iters, "--iters", 1);
    sweep.ctxs = a->ctxs, sweep.batches = a->batches, sweep.dtypes = a->dtypes, sweep.warmups = a->warmups;
    sweep.iters = a->iters, sweep.impls = a->impls, sweep.seed = a->seed;
    sweep.passes.clear();
    for (const auto& p : a->passes) sweep.passes.push_back(bench::parsePass(p));
    const bench::Format format = bench::parseFormat(a->format);
    if (a->vsTorch && a->torchScript.empty()) throw Error("--vs-torch needs --torch-script");
    std::optional<std::string> worker;
    if (std::count(sweep.impls.begin(), sweep.impls.end(), "eager") && !(worker = eagerWorker())) {
      std::erase(sweep.impls, "eager");
      if (sweep.impls.empty() && scriptImpls.empty() && !a->vsTorch) throw Error("the eager rows need fusec-eager: " + eagerWorkerMissing());
      std::cerr << "eager rows skipped: " << eagerWorkerMissing() << "\n";
    }

#ifndef FUSEC_HAVE_CUDA
    throw Error("no CUDA device (fusec was built without the CUDA toolkit)");
#else
    const rt::DeviceInfo device = rt::openDevice();
    std::cerr << "device: " << device.name << "; measuring the GEMM and copy ceilings\n";
    const bench::Ceilings ceil = bench::measureCeilings();
    sweep.bf16Tflops = ceil.bf16Tflops, sweep.f32Tflops = ceil.f32Tflops;
    char line[256];
    std::snprintf(line, sizeof line, "# %s: GEMM bf16 %.1f TFLOP/s, f32 %.1f TFLOP/s; copy %.0f GB/s", device.name.c_str(),
                  ceil.bf16Tflops, ceil.f32Tflops, ceil.copyGBps);
    std::cerr << (line + 2) << "\n";

    std::map<std::string, bench::Runner> runners;
    auto cache = std::make_shared<codegen::CubinCache>(codegen::CubinCache::defaultDir());
    const AttentionLowering lowering = attentionOf(a->attention);
    runners["compiled"] = [cache, lowering](const bench::BenchCase& c, Bindings& env) {
      bench::BenchCase with = c;
      with.attention = lowering;
      return bench::runCompiled(with, env, cache.get());
    };
    if (worker) {
      const uint64_t seed = sweep.seed;
      runners["eager"] = [worker, seed](const bench::BenchCase& c, Bindings&) {
        return runEagerWorker(*worker, c, seed);
      };
    }
    std::vector<bench::BenchRow> rows = bench::runSweep(sweep, runners, &std::cerr);
    // The Python rows: an imported model's own module, or the zoo's torch.compile reference.
    std::vector<bench::BenchRow> scripted;
    if (!scriptImpls.empty()) scripted = torchModuleRows(*a, sweep.models.at(0), scriptImpls);
    else if (a->vsTorch && a->fir.empty()) scripted = torchCompileRows(*a);
    for (auto& r : scripted) {
      r.peakTflops = r.dtype == "bf16" ? ceil.bf16Tflops : ceil.f32Tflops;  // this run's ceiling, as every row
      rows.push_back(std::move(r));
    }
    if (!scripted.empty()) bench::fillSpeedups(rows);

    std::string text = bench::formatRows(rows, format);
    if (format == bench::Format::Table) text = std::string(line) + "\n" + text;
    writeOutput(a->out, text);
    return 0;
#endif
  };
}

}  // namespace fusec::cli
