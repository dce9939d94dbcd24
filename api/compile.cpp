#include "api/compile.h"

namespace fusec::api {

AttentionLowering effectiveAttention(const std::string& program, const CompileOptions& o) {
  if (o.attention != AttentionLowering::Default) return o.attention;
  const bool modelProgram = program == "forward" || program == "train_step" || program == "fwd_bwd";
  return o.device == Device::Cuda && modelProgram ? AttentionLowering::Fused : AttentionLowering::Default;
}

std::vector<PassTiming> lowerProgram(Module& m, const std::string& program, const CompileOptions& o) {
  PassManager pm(o.passManager);
  if (o.programPasses)
    for (auto& p : programPasses(program, o.dtype, o.adamw, effectiveAttention(program, o), o.dataParallel)) pm.add(std::move(p));
  const std::string rest = o.passes.value_or(defaultOptimizationPipeline());
  if (!rest.empty()) pm.addPipeline(rest);
  pm.run(m);
  return pm.timings();
}

}  // namespace fusec::api
