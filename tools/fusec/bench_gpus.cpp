#include "tools/fusec/bench_gpus.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "bench/stats.h"
#include "ir/graph.h"
#include "support/regular_file.h"
#include "tools/fusec/script_rows.h"

namespace fusec::cli {

void checkGpuCounts(const std::vector<int64_t>& gpus, int available) {
  if (gpus.empty()) throw Error("--gpus needs at least one GPU count");
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (gpus[i] < 1) throw Error("--gpus: a GPU count must be at least 1, got " + std::to_string(gpus[i]));
    if (i > 0 && gpus[i] <= gpus[i - 1]) throw Error("--gpus: list the GPU counts in ascending order, each once");
    if (gpus[i] > available)
      throw Error("--gpus " + std::to_string(gpus[i]) + ": this host has " + std::to_string(available) + " GPU" +
                  (available == 1 ? "" : "s"));
  }
}

std::string dataParallelRunCommand(const std::string& fusec, const std::string& model, int64_t ctx, int64_t batch,
                                   const std::string& dtype, int64_t gpus, int steps, uint64_t seed,
                                   const std::string& attention, const std::string& report,
                                   const std::string& timeline, bool shardOptimizer) {
  std::string cmd = shellQuoted(fusec) + " run";
  if (gpus > 1) cmd += " --gpus " + std::to_string(gpus) + (shardOptimizer ? " --shard-optimizer" : "");
  cmd += " --program train_step --model " + shellQuoted(model) + " --dtype " + dtype + " --random-inputs --batch " +
         std::to_string(batch) + " --ctx " + std::to_string(ctx) + " --steps " + std::to_string(steps) + " --seed " +
         std::to_string(seed) + (attention.empty() ? "" : " --attention " + attention) + " --report " + shellQuoted(report);
  // The collectives' exposed time needs a traced step; one GPU has none to expose.
  if (gpus > 1) cmd += " --timeline " + shellQuoted(timeline);
  return cmd;
}

bench::BenchRow dataParallelRow(const std::string& reportJson, int warmup, int iters) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(reportJson);
  } catch (const std::exception& e) {
    throw Error(std::string("fusec run's report is not JSON: ") + e.what());
  }
  bench::BenchRow r;
  try {
    r.model = j.at("model").get<std::string>();
    r.dtype = j.at("dtype").get<std::string>();
    r.batch = j.at("batch").get<int64_t>();
    r.ctx = j.at("ctx").get<int64_t>();
    r.gpus = j.at("gpus").get<int>();
    const auto steps = j.at("steps_ms").get<std::vector<double>>();
    if (int64_t(steps.size()) < int64_t(warmup) + iters)
      throw Error("fusec run's report has " + std::to_string(steps.size()) + " steps, not " +
                  std::to_string(warmup + iters) + " (warm-up and timed)");
    r.ms = bench::summarize(std::vector<double>(steps.begin() + warmup, steps.begin() + warmup + iters));
    if (j.contains("overlap")) r.exposedCommMs = j.at("overlap").at("exposed_comm_ms").get<double>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("fusec run's report: ") + e.what());
  }
  r.pass = "step";
  r.impl = "compiled";
  r.warmup = warmup;
  r.iters = iters;
  return r;
}

namespace {

// A child's file, or "" where it left none (a job that failed before writing it).
std::string readIfThere(const std::filesystem::path& p) {
  try {
    return readRegularFile(p.string());
  } catch (const Error&) {
    return "";
  }
}

// The last non-empty line of a child's stderr, "error: " dropped (a row's status).
std::string lastLine(const std::string& text) {
  std::istringstream in(text);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  for (const char* prefix : {"error: ", "fusec: error: "})
    if (last.rfind(prefix, 0) == 0) last = last.substr(std::string(prefix).size());
  return last;
}

// A private directory for the rows' reports, removed at the end.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "fusec-bench-gpus-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw Error("bench --gpus: cannot make a temporary directory in " + pattern);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace

std::vector<bench::BenchRow> dataParallelRows(const DataParallelSweep& s, std::ostream& progress) {
  const TempDir dir;
  const std::string fusec = selfExecutable();
  // Step 1 tunes the GEMMs, step 2 captures the CUDA graph: the warm-up covers both.
  const int warmup = std::max(s.warmup, 2), steps = warmup + s.iters + 1;
  std::vector<bench::BenchRow> rows;
  for (const auto& m : s.models)
    for (int64_t ctx : s.ctxs)
      for (int64_t batch : s.batches)
        for (const auto& dtype : s.dtypes)
          for (int64_t gpus : s.gpus) {
            const std::string tag = m.name() + "-" + std::to_string(ctx) + "-" + std::to_string(batch) + "-" + dtype +
                                    "-" + std::to_string(gpus);
            const auto report = dir.path / (tag + ".json"), timeline = dir.path / (tag + "-timeline.json"),
                       err = dir.path / (tag + ".err");
            progress << "bench --gpus: " << m.name() << " ctx=" << ctx << " batch=" << batch << " " << dtype << " on "
                     << gpus << " GPU" << (gpus > 1 ? "s" : "") << std::endl;
            const std::string cmd = dataParallelRunCommand(fusec, m.name(), ctx, batch, dtype, gpus, steps, s.seed,
                                                           s.attention, report.string(), timeline.string(),
                                                           s.shardOptimizer) +
                                    " >/dev/null 2>" + shellQuoted(err.string());
            bench::BenchRow r;
            try {
              commandLines(cmd, "fusec run");
              r = dataParallelRow(readRegularFile(report.string()), warmup, s.iters);
            } catch (const Error& e) {
              r.model = m.name(), r.ctx = ctx, r.batch = batch, r.dtype = dtype, r.gpus = int(gpus);
              r.pass = "step", r.impl = "compiled", r.warmup = warmup, r.iters = s.iters;
              const std::string why = lastLine(readIfThere(err));
              r.status = bench::statusFromError(why.empty() ? e.what() : why);
              progress << "  " << r.status << std::endl;
            }
            r.modelFlopsPerToken = m.flopsPerToken(ctx, bench::BenchPass::Step);
            r.peakTflops = dtype == "bf16" ? s.bf16Tflops : s.f32Tflops;
            rows.push_back(std::move(r));
          }
  bench::fillScalingEfficiency(rows);
  return rows;
}

}  // namespace fusec::cli
