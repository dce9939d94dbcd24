#include "passes/pipeline.h"

#include <algorithm>

namespace fusec {

const std::vector<std::string>& programNames() {
  static const std::vector<std::string> names = {"forward", "train_step", "attention", "attention_backward"};
  return names;
}

AttentionLowering parseAttentionLowering(const std::string& text) {
  if (text == "fused") return AttentionLowering::Fused;
  if (text == "naive") return AttentionLowering::Naive;
  throw Error("unknown attention lowering '" + text + "' (known: fused, naive)");
}

const char* attentionLoweringName(AttentionLowering l) {
  switch (l) {
    case AttentionLowering::Fused: return "fused";
    case AttentionLowering::Naive: return "naive";
    default: return "default";
  }
}

AttentionLowering resolveAttentionLowering(const std::string& program, AttentionLowering requested, bool forGpu) {
  if (requested != AttentionLowering::Default) return requested;
  const bool modelProgram = program == "forward" || program == "train_step" || program == "fwd_bwd";
  return forGpu && modelProgram ? AttentionLowering::Fused : AttentionLowering::Naive;
}

const char* const kAttentionDefaultHelp =
    "fused for the models' programs on the GPU and in `fusec compile`, naive on the CPU and for the attention "
    "programs";

std::vector<std::string> programPassNames(const std::string& program, DType dtype, AttentionLowering attention,
                                          int64_t ranks, bool shardOptimizer) {
  // fwd_bwd is train_step without the optimizer: loss and gradients as outputs (what eager's
  // loss.backward() computes). `fusec bench --passes fwd_bwd` builds it; it is not one of the
  // programs `fusec compile` traces.
  // attention_backward is the attention with a cotangent input: autodiff makes it the VJP.
  const bool train = program == "train_step", grads = train || program == "fwd_bwd" || program == "attention_backward";
  if (program != "fwd_bwd" && std::find(programNames().begin(), programNames().end(), program) == programNames().end()) {
    std::string known;
    for (const std::string& n : programNames()) known += (known.empty() ? "" : ", ") + n;
    throw Error("unknown program '" + program + "' (known: " + known + ")");
  }
  if (dtype != DType::f32 && dtype != DType::bf16)
    throw Error("programs compute in f32 or bf16, not " + std::string(dtypeName(dtype)));
  // Callers resolve Default for their device (api::lowerProgram); left Default, it is the CPU's.
  const bool fused = resolveAttentionLowering(program, attention, false) == AttentionLowering::Fused;
  const bool bf16 = dtype == DType::bf16;
  // Attention first becomes matmuls around a softmax op: autocast must see those GEMMs (bf16)
  // apart from the softmax (f32). autocast reads the forward graph only, so the backward's
  // dtypes follow from the VJPs, as in PyTorch. The other composites reach autodiff whole:
  // their hand-written VJPs save less than differentiating their primitives would (softmax's
  // backward reads only its output; the max subtraction and the row sums are not kept).
  // Then everything is decomposed for fusion.
  // Fused, attention stays one composite to the end (autocast casts its operands to bf16 and
  // keeps its lse in f32; autodiff's VJP is attention_backward).
  std::vector<std::string> names;
  if (!fused) names.push_back("decompose-attention");
  if (bf16) names.push_back("autocast");
  if (grads) names.push_back("autodiff");
  if (grads && ranks > 1) names.push_back("data-parallel");
  if (train) names.push_back("adamw");
  // bf16 weights live as persistent copies (refreshed by AdamW in training, made once at
  // load for inference), so no step casts a weight.
  if (bf16) names.push_back("cache-weight-casts");
  // ZeRO-1 with bf16 compute: each rank keeps only its rows of the f32 master weights, and
  // the ranks gather the bf16 copies the GEMMs read (half the bytes of the f32 weights).
  if (bf16 && train && ranks > 1 && shardOptimizer) names.push_back("shard-master-weights");
  names.push_back(fused ? "decompose-keep-attention" : "decompose");
  return names;
}

std::vector<std::unique_ptr<Pass>> programPasses(const std::string& program, DType dtype, const AdamWConfig& adamw,
                                                 AttentionLowering attention, const DataParallelConfig& dataParallel) {
  std::vector<std::unique_ptr<Pass>> passes;
  for (const std::string& name : programPassNames(program, dtype, attention, dataParallel.ranks, dataParallel.shardOptimizer))
    passes.push_back(name == "adamw"           ? createAdamWPass(adamw)
                     : name == "data-parallel" ? createDataParallelPass(dataParallel)
                                               : createPass(name));
  return passes;
}

std::string defaultOptimizationPipeline(bool outputsToCaller) {
  // Clean up what the program passes left (stop_gradient, dead forward values, duplicate
  // casts), let GEMMs whose results are returned widened write them wide, fold layouts into
  // GEMMs and merge them, clean up again, split the long column reductions in two (so they
  // fill the GPU), then fuse, lay the fused top level out afresh in program order (compact:
  // what follows walks it densely), order and plan.
  return "canonicalize,cse,dce,widen-gemm-outputs,gemm-layout,merge-gemms,canonicalize,cse,dce,split-reductions,fuse,compact,"
         "step-invariant,schedule," + std::string(outputsToCaller ? "memory-plan-outputs-last" : "memory-plan");
}

}  // namespace fusec
