// `fusec profile`: the per-kernel breakdown the seed reports got from nsys, from one command.
// The program is built and bound as `fusec bench` does (bench/program.h, bench/bench_case.h),
// warmed up, then the whole step is timed over --iters CUDA-graph replays and every launch over
// --iters more (median per launch): by default its kernels' start and end on the device, from
// CUPTI, in the graph (as nsys shows them), else (--timing events, or no CUPTI) CUDA events
// around each launch, launched one by one; bench/profile.h groups the
// launches (by category and by kernel across layers) from the planned Graph itself.
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>

#include "bench/bench_case.h"
#include "bench/profile.h"
#include "bench/sweep.h"
#include "bench/trace.h"
#include "support/atomic_file.h"
#include "support/env.h"
#include "frontend/models/zoo_model.h"
#include "frontend/token_data.h"
#include "ir/roles.h"
#include "ir/step_inputs.h"
#include "tools/fusec/commands.h"
#include "tools/fusec/common_flags.h"
#include "tools/fusec/job.h"
#ifdef FUSEC_HAVE_NCCL
#include "runtime/collectives.h"
#endif
#ifdef FUSEC_HAVE_CUDA
#include "bench/ceilings.h"
#include "bench/program.h"
#include "codegen/kernel_abi.h"
#include "bench/stats.h"
#include "bench/timer.h"
#include "frontend/program_state.h"
#include "runtime/device.h"
#include "runtime/executable.h"
#include "runtime/kernel_activity.h"
#endif

namespace fusec::cli {

namespace {

struct ProfileArgs {
  std::string model = "small", program = "train_step", dtype = "fp32", format = "table", attention, trace;
  std::string timing = "kernels";
  std::string data, dataDType = "uint16";  // --data: the step's tokens from a token file
  int64_t batch = 4, ctx = 256;
  CLI::Option *batchOpt = nullptr, *ctxOpt = nullptr;
  ModelOverrides overrides;
  int iters = 10, warmup = 3;
  uint64_t seed = 0;
  // --gpus N: rank 0's profile of a data-parallel step (tools/fusec/job.h starts the ranks).
  int64_t gpus = 0;
  double bucketMb = kDefaultBucketMb;
  bool shardOptimizer = false;
  std::string gradReduceDType = "fp32";
};

// What makes the ranks' programs the same: a rank started with other flags is refused.
std::string profileFingerprint(const ProfileArgs& a, const api::Model& model) {
  std::ostringstream f;
  f << "fusec " << FUSEC_VERSION << " profile\nmodel " << model.name() << " " << model.params().size() << "\nprogram "
    << a.program << "\ndtype " << a.dtype << "\nbatch " << a.batch << "\nctx " << a.ctx << "\nattention " << a.attention
    << "\niters " << a.iters << "\nwarmup " << a.warmup << "\ntiming " << a.timing << "\nbucket-mb " << a.bucketMb
    << "\nshard " << a.shardOptimizer << "\nwire " << a.gradReduceDType << "\nseed " << a.seed << "\ndata " << a.data
    << "\n";
  return f.str();
}

#ifdef FUSEC_HAVE_CUDA
// One program on the device: its launches classified from the planned graph, per-launch
// medians, and the CUDA-graph step median.
// `activity`: CUPTI, to time kernels (null: CUDA events).
// `dataParallel` and `comm`: one rank's step of a job (every rank runs this in step).
bench::ProgramProfile profileProgram(const ProfileArgs& a, const api::Model& model, bench::BenchPass pass,
                                     Bindings env, const codegen::CubinCache* cache, rt::KernelActivity* activity,
                                     const DataParallelConfig& dataParallel = {}, rt::Communicator* comm = nullptr) {
  Module m;
  const AttentionLowering lowering = resolveAttentionLowering(bench::benchProgramName(pass), attentionOf(a.attention), true);
  // The host phases, for --trace: trace and passes, NVRTC and loading, the first run (which
  // tunes the GEMMs at their first use).
  using Clock = std::chrono::steady_clock;
  auto msSince = [](Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); };
  std::vector<PassTiming> passes;
  auto t0 = Clock::now();
  Graph& g = bench::buildProgram(m, model, pass, bench::benchDType(a.dtype), a.batch, a.ctx, models::AdamWConfig{}, lowering,
                                 &passes, dataParallel);
  bench::ProgramProfile p;
  double passMs = 0;
  for (const PassTiming& t : passes) passMs += t.ms;
  p.host.push_back({"trace", std::max(0.0, msSince(t0) - passMs)});
  for (const PassTiming& t : passes) p.host.push_back({"pass " + t.name, t.ms});
  p.program = pass == bench::BenchPass::Forward ? "forward" : "train_step";
  p.launches = bench::classifyLaunches(g);
  std::optional<int64_t> rank;  // this process's rank in a job (a communicator needs NCCL)
#ifdef FUSEC_HAVE_NCCL
  if (comm) rank = comm->rank();
#endif
  bindProgramState(g, env, rank);
  rt::ExecutableOptions opts;
  opts.cache = cache;
  opts.communicator = comm;
  p.ranks = int(dataParallel.ranks);
  t0 = Clock::now();
  rt::Executable exe(g, opts);
  p.host.push_back({"NVRTC and load kernels", msSince(t0)});
  if (exe.launches().size() != p.launches.size())
    throw Error("internal: the runtime has " + std::to_string(exe.launches().size()) + " launches, the profile " +
                std::to_string(p.launches.size()));
  for (size_t i = 0; i < p.launches.size(); ++i) {
    const auto& info = exe.launches()[i];
    const bool collective = p.launches[i].category == bench::LaunchCategory::Comm;
    if ((info.kind == rt::LaunchInfo::Kind::Gemm) != p.launches[i].gemm ||
        (info.kind == rt::LaunchInfo::Kind::Collective) != collective ||
        (!p.launches[i].gemm && !collective && info.name != codegen::sanitizeKernelName(p.launches[i].name)))
      throw Error("internal: launch " + std::to_string(i) + " is '" + info.name + "' in the runtime, '" +
                  p.launches[i].name + "' in the profile");
    p.launches[i].name = info.name;  // GEMMs and collectives: the runtime's name carries the shape
  }
  exe.bind(env);
  int64_t step = 0;
  auto call = [&] {
    exe.bind(stepInputs(g, ++step, 0));
    exe.run();
  };
  // The first run: the GEMMs' algorithms are tuned here (or read from the tuning cache).
  t0 = Clock::now();
  call();
  exe.synchronize();
  p.host.push_back({"first run (GEMM autotune)", msSince(t0)});
  // Warm-up, the graph capture among it (run() captures on its second call), then the graph
  // replays; then the per-launch runs: graph replays under CUPTI, else the list launched
  // directly between CUDA events.
  p.graphMs = bench::summarize(bench::timeOnStream(call, exe.stream(), std::max(a.warmup, 2), a.iters)).median;
  std::vector<std::vector<float>> runs;
  if (activity) {
    try {
      std::vector<rt::StepOverlap> overlaps(size_t(a.iters));
      for (int i = 0; i < a.iters; ++i) runs.push_back(exe.timeKernels(*activity, &overlaps[size_t(i)]));
      p.kernelTimes = true;
      if (comm) {  // the replay whose exposed collective time is the median
        std::sort(overlaps.begin(), overlaps.end(),
                  [](const rt::StepOverlap& x, const rt::StepOverlap& y) { return x.exposedCommMs < y.exposedCommMs; });
        p.overlap = overlaps[overlaps.size() / 2];
      }
    } catch (const Error& e) {
      // A job's ranks must stay in step: none may fall back alone to launching one by one.
      if (comm) throw;
      std::cerr << "fusec: warning: " << e.what() << "; timing each launch with CUDA events instead\n";
      runs.clear();
    }
  }
  if (runs.empty())
    for (int i = 0; i < a.iters; ++i) runs.push_back(exe.timeLaunches());
  p.ms = bench::medianPerLaunch(runs);
  for (size_t i = 0; i < p.launches.size(); ++i)  // the GEMMs' algorithms, chosen at the first run
    if (const auto& t = exe.launches()[i].gemmTuning)
      p.gemmTuning.push_back({p.launches[i].group + (p.launches[i].backward ? " (bwd)" : ""),
                              exe.launches()[i].gemmCalls, *t, p.ms[i]});
  return p;
}
#endif

}  // namespace

Command addProfileCommand(CLI::App& app) {
  auto a = std::make_shared<ProfileArgs>();
  CLI::App* cmd = app.add_subcommand("profile", "Per-launch GPU time of a compiled program, by category and by kernel");
  cmd->add_option("--model", a->model, "Model (default: small)")->type_name("NAME");
  cmd->add_option("--program", a->program, "forward or train_step (default; profiles forward too)")
      ->check(CLI::IsMember({"forward", "train_step"}))
      ->type_name("PROGRAM");
  addDtypeFlag(*cmd, a->dtype, "fp32");
  addAttentionFlag(*cmd, a->attention, kAttentionDefaultHelp);
  a->batchOpt = cmd->add_option("--batch", a->batch, "Batch size (default: 4, or an imported model's)")->type_name("N");
  a->ctxOpt = cmd->add_option("--ctx", a->ctx, "Sequence length (default: 256, at most the model's context)")->type_name("N");
  a->overrides.add(*cmd);
  cmd->add_option("--iters", a->iters, "Timed runs; each launch's median is reported (default: 10)")->type_name("N");
  cmd->add_option("--warmup", a->warmup, "Untimed runs first (default: 3; at least 2, the graph capture)")->type_name("N");
  addSeedFlag(*cmd, a->seed, "Seed of the weights and tokens (default: 0)");
  cmd->add_option("--data", a->data,
                  "Profile on --batch windows of --ctx tokens drawn (with --seed) from a flat token file (CS336's "
                  "np.memmap format) instead of uniformly random ids: how ids repeat (real text is skewed) changes the "
                  "embedding gradient's work")
      ->type_name("TOKENS");
  cmd->add_option("--data-dtype", a->dataDType, "The tokens of --data: uint16 (default) or int32")
      ->check(CLI::IsMember({"uint16", "int32"}));
  cmd->add_option("--format", a->format, "table (default) or json")
      ->check(CLI::IsMember({"table", "json"}))
      ->type_name("FORMAT");
  cmd->add_option("--timing", a->timing,
                  "How each launch is timed: kernels (default: its kernels' start and end on the device, from CUPTI, "
                  "in the step's CUDA graph, as nsys shows them; CUDA events where CUPTI is missing or taken, saying "
                  "why) or events (CUDA events around each launch, launched one by one: each time then includes a "
                  "launch gap, about 2.4 us on an H200)")
      ->check(CLI::IsMember({"kernels", "events"}))
      ->type_name("MODE");
  cmd->add_option("--trace", a->trace,
                  "Also write a Chrome trace-event file (ui.perfetto.dev, chrome://tracing): every launch at its "
                  "measured time with its arguments, the CUDA-graph step, the host's compile phases")
      ->type_name("FILE.json");
  cmd->add_option("--gpus", a->gpus,
                  "Profile rank 0 of a data-parallel training step on N GPUs (one process a GPU, started here; or "
                  "under torchrun): the collectives in a comm category, and how much of their time no compute hid")
      ->type_name("N");
  CLI::Option* oBucket = cmd->add_option("--bucket-mb", a->bucketMb, "--gpus: gradients reduced together, in MB (default " + std::to_string(kDefaultBucketMb) + ")")
                             ->type_name("MB");
  CLI::Option* oWire = cmd->add_option("--grad-reduce-dtype", a->gradReduceDType,
                                       "--gpus: the gradients' dtype on the wire, fp32 (default) or bf16")
                           ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_flag("--shard-optimizer", a->shardOptimizer,
                "--gpus: each GPU keeps the AdamW moments of its 1/N of every weight's rows (ZeRO-1)");

  return [cmd, a, oBucket, oWire]() -> int {
    if (!cmd->parsed()) return -1;
    // Everything the flags can get wrong fails before the device is touched.
    const std::unique_ptr<api::Model> model = a->overrides.model(a->model);
    resolveShape(*model, a->batch, a->batchOpt->count() > 0, a->ctx, a->ctxOpt->count() > 0);
    requireAtLeast(a->iters, "--iters", 1);
    requireAtLeast(a->warmup, "--warmup", 0);
    const bench::Format format = bench::parseFormat(a->format);
    const bool job = a->gpus > 1 || envSet("WORLD_SIZE");
    if (!job && (oBucket->count() || oWire->count() || a->shardOptimizer))
      throw Error("--bucket-mb, --grad-reduce-dtype and --shard-optimizer go with --gpus N");
    if (job && a->program != "train_step") throw Error("--gpus profiles --program train_step");
    if (!(a->bucketMb > 0) || a->bucketMb > 1e6) throw Error("--bucket-mb must be a positive size in MB");
    const JobRole role = jobRole(a->gpus);
    if (role.launcher) return launchWorkers(role.ranks);
    const bool leader = role.rank == 0;
    // The step's ids and targets: a batch of the token file, checked against the vocabulary.
    std::optional<Bindings> tokens;
    if (!a->data.empty()) {
      const TokenFile file(a->data, parseTokenDType(a->dataDType));
      std::mt19937_64 rng(a->seed);
      tokens = file.sample(a->batch, a->ctx, rng);
      model->validateInputs(api::Program{"train_step", a->batch, a->ctx}, *tokens);
    }
    if (!a->trace.empty()) {  // before minutes of profiling, not after
      const std::filesystem::path dir = std::filesystem::absolute(a->trace).parent_path();
      if (!std::filesystem::is_directory(dir)) throw Error("--trace " + a->trace + ": no directory " + dir.string());
    }

#ifndef FUSEC_HAVE_CUDA
    (void)format;
    (void)tokens;
    throw Error("no CUDA device (fusec was built without the CUDA toolkit)");
#else
    const rt::DeviceInfo device = rt::openDevice();
    DataParallelConfig dataParallel;
    std::shared_ptr<rt::Communicator> comm;
    if (role.ranks > 1) {
#ifndef FUSEC_HAVE_NCCL
      throw Error("this fusec was built without NCCL (nccl.h not found): --gpus needs it");
#else
      dataParallel = DataParallelConfig{role.ranks, int64_t(a->bucketMb * 1e6), a->shardOptimizer,
                                        dtypeOf(a->gradReduceDType)};
      comm = joinJob(role, profileFingerprint(*a, *model));
#endif
    }
    // The weights and the inputs of a training step (a forward ignores the targets).
    Bindings env = model->initialWeights(a->seed);
    for (auto& [name, t] : tokens ? *tokens : model->exampleInputs({"train_step", a->batch, a->ctx}, a->seed))
      env[name] = std::move(t);
    codegen::CubinCache cache(codegen::CubinCache::defaultDir());
    std::vector<bench::ProgramProfile> programs;
    // CUPTI before any executable exists: its kernel records then cover the graphs built later.
    std::optional<rt::KernelActivity> activity;
    if (a->timing == "kernels") {
      try {
        activity.emplace();
      } catch (const Error& e) {
        std::cerr << "fusec: warning: " << e.what() << "; timing each launch with CUDA events instead\n";
      }
    }
    rt::KernelActivity* kernels = activity ? &*activity : nullptr;
    // The two ceilings every row's roofline is judged against, measured in this run.
    if (leader) std::cerr << "measuring the copy and GEMM ceilings\n";
    const bench::Ceilings ceilings = bench::measureCeilings();
    // A train_step profile shows the forward first: the GEMM share of each is the comparison
    // the seeds made (forward vs full step). A job's forward has no collectives: one GPU's.
    if (a->program == "train_step" && !comm) {
      std::cerr << "profiling forward\n";
      programs.push_back(profileProgram(*a, *model, bench::BenchPass::Forward, env, &cache, kernels));
    }
    if (leader) std::cerr << "profiling " << a->program << (comm ? " on " + std::to_string(role.ranks) + " GPUs" : "") << "\n";
    programs.push_back(profileProgram(*a, *model,
                                      a->program == "forward" ? bench::BenchPass::Forward : bench::BenchPass::Step, env,
                                      &cache, kernels, dataParallel, comm.get()));
#ifdef FUSEC_HAVE_NCCL
    if (comm) comm->finish();
#endif
    if (!leader) return 0;
    for (auto& p : programs) p.ceilings = ceilings;
    const std::string header = model->name() + " " + a->dtype + " batch=" + std::to_string(a->batch) +
                               (comm ? " (each of " + std::to_string(role.ranks) + " GPUs)" : "") +
                               " ctx=" + std::to_string(a->ctx) + (a->data.empty() ? "" : " tokens from " + a->data) +
                               " iters=" + std::to_string(a->iters) + " on " +
                               device.name + " (median per launch: " + bench::timingDescription(programs) + ")";
    std::cout << bench::formatProfile(header, programs, format);
    if (!a->trace.empty()) writeFileAtomically(a->trace, bench::chromeTrace(header, programs));
    return 0;
#endif
  };
}

}  // namespace fusec::cli
