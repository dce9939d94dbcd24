// One benchmark row per (model, ctx, batch, dtype, pass, impl, warmup) and its three output
// formats. The JSON keys are the contract with bench/torch_compile_ref.py, which prints the
// same rows, so `fusec bench --vs-torch` can merge both into one table: every key is present
// on every row (null where it does not apply), in a fixed order.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/stats.h"

namespace fusec::bench {

struct BenchRow {
  std::string model;
  int64_t ctx = 0, batch = 0;
  std::string dtype;   // fp32 | bf16
  std::string pass;    // forward | fwd_bwd | step
  std::string impl;    // eager | compiled | torch.compile | torch.compile-ro
  int warmup = 0, iters = 0;
  std::string status = "OK";  // OK | OOM | the error's text
  std::optional<Stats> ms;    // per-iteration milliseconds (rows that ran)
  // Memory: eager reports the caching allocator's peak allocated and reserved bytes, compiled
  // its arena and its resident region (weights, optimizer state, bf16 copies).
  std::optional<int64_t> allocatedBytes, reservedBytes, arenaBytes, residentBytes;
  double modelFlopsPerToken = 0;  // bench/flops.h
  double peakTflops = 0;          // the GEMM rate measured in the same run, for this dtype
  std::optional<double> speedup;  // eager median / this median (set by fillSpeedups)
  // Data parallel (`fusec bench --gpus`): the job's GPUs, each on `batch` sequences (weak
  // scaling); the same implementation's 1-GPU median over this median; and the time its
  // collectives ran while no compute kernel did, in a traced step of rank 0.
  int gpus = 1;
  std::optional<double> scalingEfficiency, exposedCommMs;

  bool ok() const { return status == "OK" && ms.has_value(); }
  std::optional<double> tokensPerSecond() const;  // every GPU's tokens
  // Model FLOPs per second of one GPU over the measured GEMM rate (a fraction).
  std::optional<double> mfu() const;
  // Peak device memory: allocated (eager) or arena + resident (compiled).
  std::optional<int64_t> peakBytes() const;
};

// A row's status for a failure: "OOM" for any out-of-memory message (fusec's "out of GPU
// memory: ...", LibTorch's "CUDA out of memory. ..."), otherwise the message itself.
std::string statusFromError(const std::string& message);

// Sets `speedup` on every OK row that has an OK eager row with the same model, ctx, batch,
// dtype, pass and warmup.
void fillSpeedups(std::vector<BenchRow>& rows);

// Sets `scalingEfficiency` on every OK row of several GPUs that has none yet and an OK 1-GPU
// row of the same model, ctx, batch, dtype, pass and impl.
void fillScalingEfficiency(std::vector<BenchRow>& rows);

enum class Format { Table, Json, Csv };
Format parseFormat(const std::string& name);  // table | json | csv; throws Error otherwise

// The rows in `format`; every format ends with a newline. JSON is one object per line.
std::string formatRows(const std::vector<BenchRow>& rows, Format format);

// Parses one JSON row as formatRows(..., Json) writes it (for rows from torch_compile_ref.py).
// Throws Error naming the missing or mistyped key.
BenchRow parseJsonRow(const std::string& line);

}  // namespace fusec::bench
