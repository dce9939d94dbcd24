// One benchmark configuration and the state both implementations start from: the same
// weights (CS336 init, one seed), the same random tokens, so eager and compiled rows differ
// only in how the work is done.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "bench/bench_model.h"
#include "bench/flops.h"
#include "passes/pipeline.h"
#include "frontend/models/transformer.h"
#include "ir/host_tensor.h"

namespace fusec::bench {

struct BenchCase {
  BenchModel model;
  int64_t batch = 4, seq = 256;
  DType dtype = DType::f32;  // f32, or bf16 autocast
  BenchPass pass = BenchPass::Forward;
  int warmup = 5, iters = 10;
  models::AdamWConfig adamw;
  AttentionLowering attention = AttentionLowering::Default;  // resolved for the GPU (passes/pipeline.h)
};

// Weights by state_dict name (the model's own initialisation) plus "ids" and "targets"
// (i64[batch, seq], uniform over the vocabulary). Either side adds what else its program needs
// (bindProgramState: AdamW moments, bf16 weight copies) to the same map, so one copy of the
// weights serves every row.
Bindings benchInputs(const api::Model& model, int64_t batch, int64_t seq, uint64_t seed);

// A timed run: milliseconds per iteration and the device memory it held.
struct TimedRun {
  std::vector<double> ms;
  std::optional<int64_t> allocatedBytes, reservedBytes;  // eager: the caching allocator's peaks
  std::optional<int64_t> arenaBytes, residentBytes;      // compiled: the two planned regions
};

}  // namespace fusec::bench
