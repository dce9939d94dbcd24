// `fusec bench attention`: the attention sweep (bench/attention_bench.h), a sub-mode of
// `fusec bench`. Every flag is checked before the device is touched; each shape is a row per
// implementation and OOM rows do not stop the sweep. `--vs-torch` adds PyTorch SDPA rows
// (bench/torch_sdpa_ref.py: flash, cuDNN and memory-efficient backends) from the same run,
// each after the fusec rows of its shape.
#include <algorithm>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "bench/attention_bench.h"
#include "tools/fusec/commands.h"
#include "tools/fusec/common_flags.h"
#include "tools/fusec/eager_worker.h"
#include "tools/fusec/script_rows.h"
#include "tools/fusec/write_output.h"
#ifdef FUSEC_HAVE_CUDA
#include "runtime/device.h"
#endif

namespace fusec::cli {

namespace {

struct AttentionArgs {
  bench::AttentionSweep sweep;
  std::string format = "table", out = "-", torchScript;
  bool vsTorch = false;
};

std::string joinList(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::string joinList(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

// PyTorch SDPA's rows on the same grid, every backend.
std::vector<bench::AttentionRow> sdpaRows(const AttentionArgs& a) {
  const bench::AttentionSweep& s = a.sweep;
  const std::string args = "--batch " + std::to_string(s.batch) + " --d " + joinList(s.ds) + " --seq " + joinList(s.seqs) +
                           " --dtype " + joinList(s.dtypes) + " --warmup " + std::to_string(s.warmup) + " --iters " +
                           std::to_string(s.iters) + " --format json";
  std::vector<bench::AttentionRow> rows;
  for (const auto& line : scriptRows(a.torchScript, args)) rows.push_back(bench::parseAttentionJsonRow(line));
  return rows;
}


}  // namespace

Command addBenchAttention(CLI::App& bench) {
  auto a = std::make_shared<AttentionArgs>();
#ifdef FUSEC_TORCH_SDPA_REF
  a->torchScript = FUSEC_TORCH_SDPA_REF;
#endif
  CLI::App* cmd = bench.add_subcommand(
      "attention", "Causal attention: eager LibTorch, compiled (naive) and fused (flash) fusec, per (dtype, d, seq)");
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
  addDtypeFlag(*cmd, a->sweep.dtypes, "fp32");
  cmd->add_option("--format", a->format, "table (default), json (one object per row) or csv")
      ->check(CLI::IsMember({"table", "json", "csv"}))
      ->type_name("FORMAT");
  cmd->add_option("--out", a->out, "Output file (default: stdout)")->type_name("FILE");
  cmd->add_flag("--vs-torch", a->vsTorch,
                "Add PyTorch scaled_dot_product_attention rows (flash, cuDNN, memory-efficient backends) from "
                "bench/torch_sdpa_ref.py (python3 with torch 2.3 or later)");
  cmd->add_option("--torch-script", a->torchScript, "Path of torch_sdpa_ref.py (default: the source tree's)")
      ->type_name("FILE");

  return [cmd, a]() -> int {
    if (!cmd->parsed()) return -1;
    requireAtLeast(a->sweep.batch, "--batch", 1);
    requireAtLeast(a->sweep.ds, "--d", 1);
    requireAtLeast(a->sweep.seqs, "--seq", 1);
    requireAtLeast(a->sweep.warmup, "--warmup", 0);
    requireAtLeast(a->sweep.iters, "--iters", 1);
    const bench::Format format = bench::parseFormat(a->format);
    if (a->vsTorch && a->torchScript.empty()) throw Error("--vs-torch needs --torch-script");
    if (a->vsTorch && !std::ifstream(a->torchScript)) throw Error("--torch-script: cannot read '" + a->torchScript + "'");
    auto& impls = a->sweep.impls;
    std::optional<std::string> worker;
    if (std::count(impls.begin(), impls.end(), "eager") && !(worker = eagerWorker())) {
      std::erase(impls, "eager");
      if (impls.empty() && !a->vsTorch) throw Error("the eager rows need fusec-eager: " + eagerWorkerMissing());
      std::cerr << "eager rows skipped: " << eagerWorkerMissing() << "\n";
    }
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
    if (worker)
      runners["eager"] = [worker](const bench::AttentionCase& c) { return runEagerAttentionWorker(*worker, c); };
    // PyTorch's rows first: a script that fails then costs no sweep.
    const std::vector<bench::AttentionRow> torchRows = a->vsTorch ? sdpaRows(*a) : std::vector<bench::AttentionRow>{};
    std::vector<bench::AttentionRow> rows = bench::runAttentionSweep(a->sweep, runners, &std::cerr);
    bench::mergeAttentionRows(rows, torchRows);
    std::string text = bench::formatAttentionRows(rows, format);
    if (format == bench::Format::Table) text = "# causal attention on " + device.name + "\n" + text;
    writeOutput(a->out, text);
    return 0;
#endif
  };
}

}  // namespace fusec::cli
