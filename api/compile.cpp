#include "api/compile.h"

namespace fusec::api {

AttentionLowering effectiveAttention(const std::string& program, const CompileOptions& o) {
  return resolveAttentionLowering(program, o.attention, o.device == Device::Cuda);
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
