// Data parallelism as IR: the same training program runs on every rank (one a GPU), each on
// its own batch, and the `data-parallel` pass makes each rank's gradients the mean over the
// ranks before the optimizer reads them, with all_reduce ops (ir/ops.def) the scheduler and
// the runtime treat like any other op (passes/schedule.cpp step 3 overlaps them with the
// backward; runtime/collectives.h runs them on NCCL).
#pragma once
#include <cstdint>

#include "ir/graph.h"
#include "ir/types.h"

namespace fusec {

// The default bucket (`--bucket-mb`). Measured on two H200 (bench/RESULTS.md, issue 38's sixth
// slice): against 25 MB (PyTorch DDP's default), 100 MB took 0.5 ms off medium b16's and small
// b64's step (fewer, longer NCCL launches beside the backward's kernels, which lose less time
// to them), 200 MB no more, and the first bucket still starts in the last layers' backward.
inline constexpr int kDefaultBucketMb = 100;

struct DataParallelConfig {
  int64_t ranks = 1;  // 1: a single GPU, the pass changes nothing
  // A bucket closes once its gradients hold at least this many bytes.
  int64_t bucketBytes = int64_t(kDefaultBucketMb * 1e6);
  // ZeRO-1: each rank keeps the AdamW moments of its block of rows of each weight (a 1/ranks
  // share): a gradient whose first dim divides by ranks is reduce-scattered (its mean, this
  // rank's rows) instead of all-reduced, and adamw then updates the rank's rows and
  // all-gathers the weight (passes/adamw_pass.cpp). Weights stay whole on every rank.
  bool shardOptimizer = false;
  // The gradients' dtype on the wire: f32 (the default: the job equals one GPU with the whole
  // batch to fp32 rounding), or bf16 (half the bytes; each gradient is rounded to bf16 before
  // the reduction and the mean comes back as f32 for the optimizer).
  DType reduceDType = DType::f32;
};

// When `g` returns `loss, grads...` (passes/train_passes.h appendLossGradients): the loss
// becomes its mean over the ranks, and the gradients, in the order the backward produces
// them (their definitions' order in `g`), are grouped into buckets of at least
// cfg.bucketBytes, each one all_reduce (reduce "mean") whose results replace them as
// outputs (with shardOptimizer, the gradients that split by rows one reduce_scatter instead,
// whose results are this rank's rows). A gradient that is a constant (a param the loss does not read) is the same on
// every rank and is left alone. A gradient that is cast(matmul) to the wire dtype, the
// matmul used only there (autocast's bf16 weight-gradient GEMM), becomes the matmul with
// out_dtype = the wire dtype: the GEMM writes what the collective sends, no cast kernel
// between them. Returns false with one rank or no float params; throws Error
// for any other signature, or a function that already has collectives.
bool appendGradientReduction(Graph& g, const DataParallelConfig& cfg);

}  // namespace fusec
