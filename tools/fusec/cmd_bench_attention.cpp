// `fusec bench attention`: the naive-attention sweep (bench/attention_bench.h), a sub-mode of
// `fusec bench`. Every flag is checked before the device is touched; each shape is a row per
// implementation and OOM rows do not stop the sweep.
#include <fstream>
#include <iostream>
#include <memory>

#include "bench/attention_bench.h"
#include "tools/fusec/commands.h"
#include "tools/fusec/write_output.h"
#ifdef FUSEC_HAVE_CUDA
#include "runtime/device.h"
#endif

namespace fusec::cli {

namespace {

struct AttentionArgs {
  bench::AttentionSweep sweep;
  std::string format = "table", out = "-";
};

template <class T>
void requireAtLeast(const std::vector<T>& v, const char* flag, T min) {
  if (v.empty()) throw Error(std::string(flag) + " needs at least one value");
  for (T x : v)
    if (x < min) throw Error(std::string(flag) + " must be at least " + std::to_string(min) + ", got " + std::to_string(x));
}

}  // namespace

Command addBenchAttention(CLI::App& bench) {
  auto a = std::make_shared<AttentionArgs>();
  CLI::App* cmd = bench.add_subcommand("attention", "Naive causal attention: eager LibTorch against compiled, per (d, seq)");
  cmd->add_option("--batch", a->sweep.batch, "Batch size (default: 8)")->type_name("N");
  cmd->add_option("--d", a->sweep.ds, "Head dimensions (default: 16,32,64,128)")->delimiter(',')->type_name("LIST");
  cmd->add_option("--seq", a->sweep.seqs, "Sequence lengths (default: 256,1024,4096,8192,16384)")
      ->delimiter(',')
      ->type_name("LIST");
  cmd->add_option("--warmup", a->sweep.warmup, "Warm-up calls before timing (default: 5)")->type_name("N");
  cmd->add_option("--iters", a->sweep.iters, "Timed iterations (default: 10)")->type_name("N");
  cmd->add_option("--impl", a->sweep.impls, "eager, compiled (naive attention), fused (flash attention) (default: eager,compiled)")
      ->delimiter(',')
      ->check(CLI::IsMember({"eager", "compiled", "fused"}))
      ->type_name("LIST");
  cmd->add_option("--dtype", a->sweep.dtypes, "fp32, bf16 (default: fp32)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->type_name("LIST");
  cmd->add_option("--format", a->format, "table (default), json (one object per row) or csv")
      ->check(CLI::IsMember({"table", "json", "csv"}))
      ->type_name("FORMAT");
  cmd->add_option("--out", a->out, "Output file (default: stdout)")->type_name("FILE");

  return [cmd, a]() -> int {
    if (!cmd->parsed()) return -1;
    requireAtLeast(std::vector<int64_t>{a->sweep.batch}, "--batch", int64_t(1));
    requireAtLeast(a->sweep.ds, "--d", int64_t(1));
    requireAtLeast(a->sweep.seqs, "--seq", int64_t(1));
    requireAtLeast(std::vector<int>{a->sweep.warmup}, "--warmup", 0);
    requireAtLeast(std::vector<int>{a->sweep.iters}, "--iters", 1);
    const bench::Format format = bench::parseFormat(a->format);
#ifndef FUSEC_HAVE_CUDA
    (void)format;
    throw Error("no CUDA device (fusec was built without the CUDA toolkit)");
#else
    const rt::DeviceInfo device = rt::openDevice();
    std::cerr << "device: " << device.name << "\n";
    auto cache = std::make_shared<codegen::CubinCache>(codegen::CubinCache::defaultDir());
    std::map<std::string, bench::AttentionRunner> runners;
    runners["compiled"] = [cache](const bench::AttentionCase& c) { return bench::runCompiledAttention(c, cache.get()); };
    runners["fused"] = [cache](const bench::AttentionCase& c) { return bench::runCompiledAttention(c, cache.get(), true); };
#ifdef FUSEC_HAVE_EAGER
    runners["eager"] = bench::runEagerAttention;
#else
    runners["eager"] = [](const bench::AttentionCase&) -> bench::AttentionRun {
      throw Error("fusec was built without LibTorch");
    };
#endif
    std::string text = bench::formatAttentionRows(bench::runAttentionSweep(a->sweep, runners, &std::cerr), format);
    if (format == bench::Format::Table) text = "# causal attention on " + device.name + "\n" + text;
    writeOutput(a->out, text);
    return 0;
#endif
  };
}

}  // namespace fusec::cli
