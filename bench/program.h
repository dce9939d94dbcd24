// The compiled side's programs for one benchmark pass, traced and run through the same
// pipeline as `fusec compile` (program passes, then the default optimisation pipeline):
//   forward -> @forward;  step -> @train_step (autodiff + adamw);
//   fwd_bwd -> @train_step with the program passes of "fwd_bwd" (autodiff, no adamw): it
//              returns the loss and every gradient, which is what eager's loss.backward()
//              computes, so the two sides time the same work.
#pragma once
#include <cstdint>
#include <vector>

#include "api/model.h"
#include "bench/flops.h"
#include "frontend/models/transformer.h"
#include "ir/graph.h"
#include "passes/pipeline.h"

namespace fusec::bench {

// The program a bench pass builds: "forward", "fwd_bwd" or "train_step".
const char* benchProgramName(BenchPass pass);

// The planned function of `pass` of `model` in `m` (its only function). dtype: f32 or bf16
// (autocast). Throws Error when `seq` exceeds the model's context length. `passTimings`, when
// given, receives the passes' wall times (profile's trace). `dataParallel`: one rank's step of
// a data-parallel job (passes/data_parallel.h; `fusec profile --gpus N`).
Graph& buildProgram(Module& m, const api::Model& model, BenchPass pass, DType dtype, int64_t batch,
                    int64_t seq, const models::AdamWConfig& adamw,
                    AttentionLowering attention = AttentionLowering::Default,
                    std::vector<PassTiming>* passTimings = nullptr, const DataParallelConfig& dataParallel = {});

// Sum of 2*M*N*K*batch over the top-level GEMMs of a planned graph (runtime/gemm_plan.h).
int64_t gemmFlops(const Graph& g);

}  // namespace fusec::bench
