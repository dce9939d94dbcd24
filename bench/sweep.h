// The benchmark sweep: every (model, batch, ctx, dtype, pass, warm-up, impl) combination in
// that nesting order, one row each. The implementations are passed in as functions, so the
// sweep's bookkeeping (inputs shared per model, OOM and errors as rows, progress, FLOPs and
// ceilings on every row) is tested on the CPU with stand-ins; `fusec bench` passes the real
// runners (bench/compiled_runner.h, bench/eager_runner.h).
#pragma once
#include <functional>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_case.h"
#include "bench/report.h"

namespace fusec::bench {

using Runner = std::function<TimedRun(const BenchCase&, Bindings& env)>;

struct SweepConfig {
  std::vector<BenchModel> models;
  std::vector<int64_t> ctxs = {256}, batches = {4};
  std::vector<std::string> dtypes = {"fp32"};  // fp32 | bf16
  std::vector<BenchPass> passes = {BenchPass::Forward};
  std::vector<int> warmups = {5};
  int iters = 10;
  std::vector<std::string> impls = {"eager", "compiled"};  // keys of `runners`, in row order
  uint64_t seed = 0;
  models::AdamWConfig adamw;
  double bf16Tflops = 0, f32Tflops = 0;  // the ceilings measured in this run (MFU)
};

// "fp32" -> f32, "bf16" -> bf16; throws Error otherwise.
DType benchDType(const std::string& name);

// Runs the sweep. A runner that throws gives its row the status statusFromError(message)
// (OOM or the message) and the sweep goes on. `progress` (may be null) gets one line per row
// before it runs ("[3/12] small ctx=256 batch=4 bf16 step compiled warmup=5") and its
// outcome after. Speedups are filled.
std::vector<BenchRow> runSweep(const SweepConfig& cfg, const std::map<std::string, Runner>& runners,
                               std::ostream* progress);

}  // namespace fusec::bench
