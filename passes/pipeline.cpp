#include "passes/pipeline.h"

namespace fusec {

std::vector<std::string> programPassNames(const std::string& program, DType dtype) {
  // fwd_bwd is train_step without the optimizer: loss and gradients as outputs (what eager's
  // loss.backward() computes; `fusec bench --passes fwd_bwd` times it).
  const bool train = program == "train_step", grads = train || program == "fwd_bwd";
  if (!grads && program != "forward" && program != "attention")
    throw Error("unknown program '" + program + "' (known: forward, train_step, fwd_bwd, attention)");
  if (dtype != DType::f32 && dtype != DType::bf16)
    throw Error("programs compute in f32 or bf16, not " + std::string(dtypeName(dtype)));
  const bool bf16 = dtype == DType::bf16;
  // Attention first becomes matmuls around a softmax op: autocast must see those GEMMs (bf16)
  // apart from the softmax (f32). autocast reads the forward graph only, so the backward's
  // dtypes follow from the VJPs, as in PyTorch. The other composites reach autodiff whole:
  // their hand-written VJPs save less than differentiating their primitives would (softmax's
  // backward reads only its output; the max subtraction and the row sums are not kept).
  // Then everything is decomposed for fusion.
  std::vector<std::string> names = {"decompose-attention"};
  if (bf16) names.push_back("autocast");
  if (grads) names.push_back("autodiff");
  if (train) names.push_back("adamw");
  // bf16 weights live as persistent copies (refreshed by AdamW in training, made once at
  // load for inference), so no step casts a weight.
  if (bf16) names.push_back("cache-weight-casts");
  names.push_back("decompose");
  return names;
}

std::vector<std::unique_ptr<Pass>> programPasses(const std::string& program, DType dtype, const fe::AdamWConfig& adamw) {
  std::vector<std::unique_ptr<Pass>> passes;
  for (const std::string& name : programPassNames(program, dtype))
    passes.push_back(name == "adamw" ? createAdamWPass(adamw) : createPass(name));
  return passes;
}

std::string defaultOptimizationPipeline() {
  // Clean up what the program passes left (stop_gradient, dead forward values, duplicate
  // casts), fold layouts into GEMMs and merge them, clean up again, then fuse, order and plan.
  return "canonicalize,cse,dce,gemm-layout,merge-gemms,canonicalize,cse,dce,fuse,schedule,memory-plan";
}

}  // namespace fusec
