// The registry of passes by name: the one place a new pass is made reachable from
// pipelines and the CLI.
#include <functional>
#include <utility>

#include "passes/pass.h"

namespace fusec {
namespace {

using Factory = std::unique_ptr<Pass> (*)();
const std::vector<std::pair<std::string, Factory>>& registry() {
  static const std::vector<std::pair<std::string, Factory>> r = {
      {"canonicalize", &createCanonicalizePass},
      {"cse", &createCSEPass},
      {"dce", &createDCEPass},
      {"decompose", &createDecomposePass},
      {"decompose-attention", &createDecomposeAttentionPass},
      {"decompose-keep-attention", &createDecomposeKeepAttentionPass},
      {"autodiff", &createAutodiffPass},
      {"data-parallel", static_cast<Factory>(&createDataParallelPass)},
      {"adamw", static_cast<Factory>(&createAdamWPass)},
      {"autocast", &createAutocastPass},
      {"cache-weight-casts", &createCacheWeightCastsPass},
      {"shard-master-weights", &createShardMasterWeightsPass},
      {"fuse", &createFusePass},
      {"schedule", &createSchedulePass},
      {"step-invariant", &createStepInvariantPass},
      {"compact", &createCompactPass},
      {"memory-plan", &createMemoryPlanPass},
      {"memory-plan-outputs-last", &createMemoryPlanOutputsLastPass},
      {"gemm-layout", &createGemmLayoutPass},
      {"merge-gemms", &createMergeGemmsPass},
      {"split-reductions", &createSplitReductionsPass},
      {"widen-gemm-outputs", &createWidenGemmOutputsPass},
  };
  return r;
}

}  // namespace

std::vector<std::string> passNames() {
  std::vector<std::string> names;
  for (auto& [n, f] : registry()) names.push_back(n);
  return names;
}

std::unique_ptr<Pass> createPass(std::string_view name) {
  for (auto& [n, f] : registry())
    if (n == name) return f();
  std::string known;
  for (auto& [n, f] : registry()) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown pass '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace fusec
