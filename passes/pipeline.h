// The compile pipeline (docs/pipeline.md "Order"): a traced program's own passes, which make
// it the program (decompose, autocast, autodiff, adamw, cache-weight-casts), and the default
// optimisation pipeline that runs after them unless --passes replaces it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "passes/adamw_update.h"
#include "passes/data_parallel.h"
#include "passes/pass.h"

namespace fusec {

// How the `attention` composite is lowered (`--attention=fused|naive`):
//   fused: attention and its VJP attention_backward survive decomposition and each becomes
//          one kernel of the `attention` family (a generated flash-attention kernel);
//   naive: decompose-attention makes them GEMMs around a softmax before autocast (the
//          seeds' naive attention: S and P exist in memory).
// Default is resolved in one place, resolveAttentionLowering.
enum class AttentionLowering { Default, Fused, Naive };
AttentionLowering parseAttentionLowering(const std::string& text);  // "fused" | "naive"
const char* attentionLoweringName(AttentionLowering l);             // "fused" | "naive" | "default"
// The one place the attention lowering is decided: `requested` unless Default. By default a
// model's programs (forward, train_step, fwd_bwd) built for the GPU fuse attention (one
// flash-attention kernel each way: what fusec runs there, and what `fusec compile` shows);
// everything else is naive: the CPU interpreter runs the programs as traced, and the attention
// programs are the seed benchmark of naive attention (--attention=fused compares the fused).
AttentionLowering resolveAttentionLowering(const std::string& program, AttentionLowering requested, bool forGpu);
// That default in words, for the --attention flags' help.
extern const char* const kAttentionDefaultHelp;

// The programs `fusec compile --program` traces: forward, train_step, attention,
// attention_backward.
const std::vector<std::string>& programNames();

// The program passes for `program` ("forward", "attention", "attention_backward": the traced
// function is the program; "train_step": the traced loss becomes a training step) at compute
// dtype `dtype` (f32, or bf16 for autocast; attention_backward is f32 only when naive). "fwd_bwd" (fusec bench) is
// "train_step" without adamw: it returns the loss and every gradient. With dataParallel.ranks
// above 1, train_step and fwd_bwd reduce their gradients over the ranks (data-parallel, after
// autodiff). Throws Error for another program or dtype.
std::vector<std::unique_ptr<Pass>> programPasses(const std::string& program, DType dtype, const AdamWConfig& adamw,
                                                 AttentionLowering attention = AttentionLowering::Default,
                                                 const DataParallelConfig& dataParallel = {});

// Their names, in order (for messages and tests).
std::vector<std::string> programPassNames(const std::string& program, DType dtype,
                                          AttentionLowering attention = AttentionLowering::Default, int64_t ranks = 1,
                                          bool shardOptimizer = false);

// The default optimisation pipeline as a --passes list. outputsToCaller: the outputs are
// written into a caller's buffers (the C interface), so their storage is planned above the
// rest of the arena (memory-plan-outputs-last), which the runtime allocates only if needed.
std::string defaultOptimizationPipeline(bool outputsToCaller = false);

}  // namespace fusec
