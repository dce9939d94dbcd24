#include "passes/pipeline.h"

namespace fusec {

std::vector<std::string> programPassNames(const std::string& program, DType dtype) {
  const bool train = program == "train_step";
  if (!train && program != "forward" && program != "attention")
    throw Error("unknown program '" + program + "' (known: forward, train_step, attention)");
  if (dtype != DType::f32 && dtype != DType::bf16)
    throw Error("programs compute in f32 or bf16, not " + std::string(dtypeName(dtype)));
  const bool bf16 = dtype == DType::bf16;
  // decompose first: autocast must see attention's matmuls and softmax as primitives, and
  // autodiff of primitives is exact. autocast then reads the forward graph only, so the
  // backward's dtypes follow from the VJPs.
  std::vector<std::string> names = {"decompose"};
  if (bf16) names.push_back("autocast");
  if (train) {
    names.push_back("autodiff");
    names.push_back("adamw");
    if (bf16) names.push_back("cache-weight-casts");
  }
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
