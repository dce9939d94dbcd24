// `fusec bench --gpus 1,2,4`: data-parallel rows. Each (model, ctx, batch, dtype) at each GPU
// count is a job of its own, launched as a user launches one: `fusec run [--gpus N] --program
// train_step --random-inputs ...` in a child process (fresh processes, every GPU free again
// between rows), which writes its step times and, from a CUPTI-traced last step of rank 0,
// the time its collectives ran while no compute kernel did (`run --report`, `--timeline`).
// A row's statistics are over the steps after the warm-up, the traced step left out; its
// scaling efficiency is the 1-GPU row's median over its own (weak scaling: the same batch on
// every GPU). A job that fails gives its row the status (OOM, or its last error line) and the
// sweep goes on.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "bench/bench_model.h"
#include "bench/report.h"

namespace fusec::cli {

struct DataParallelSweep {
  std::vector<bench::BenchModel> models;  // the zoo's (imported models are not run by --gpus)
  std::vector<int64_t> ctxs, batches, gpus;
  std::vector<std::string> dtypes;
  int warmup = 5, iters = 10;
  uint64_t seed = 0;
  std::string attention;  // --attention for the runs ("": their default)
  bool shardOptimizer = false;  // --shard-optimizer for the jobs of 2 GPUs or more
  double bf16Tflops = 0, f32Tflops = 0;  // this run's GEMM ceilings (MFU)
};

// The GPU counts of --gpus: ascending, distinct, each 1..`available`. Throws Error otherwise.
void checkGpuCounts(const std::vector<int64_t>& gpus, int available);

// The child's command line for one row (tested on the CPU).
std::string dataParallelRunCommand(const std::string& fusec, const std::string& model, int64_t ctx, int64_t batch,
                                   const std::string& dtype, int64_t gpus, int steps, uint64_t seed,
                                   const std::string& attention, const std::string& report,
                                   const std::string& timeline, bool shardOptimizer = false);

// A row from a `run --report` JSON text: the steps [warmup, warmup + iters) of steps_ms.
// Throws Error for a report that lacks them.
bench::BenchRow dataParallelRow(const std::string& reportJson, int warmup, int iters);

// Runs every row (progress lines to `progress`) and fills their scaling efficiencies.
std::vector<bench::BenchRow> dataParallelRows(const DataParallelSweep& s, std::ostream& progress);

}  // namespace fusec::cli
