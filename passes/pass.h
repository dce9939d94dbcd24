// Passes rewrite a Module in place and say whether they changed it (XLA style).
#pragma once
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace fusec {

struct AdamWConfig;
struct DataParallelConfig;

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  virtual bool run(Module& m) = 0;
  // A pass made of named rewrite patterns (canonicalize) lists them, can have some switched
  // off (--disable-pattern), and counts what fired in its last run (--pass-stats).
  virtual std::vector<std::string> patternNames() const { return {}; }
  virtual void disablePatterns(const std::set<std::string>& names) { (void)names; }
  virtual std::vector<std::pair<std::string, int64_t>> statistics() const { return {}; }
  // True for a pass that never changes a kernel's body (ops, values, types, names): the pass
  // manager's verification after it then checks each kernel op against its body without
  // walking the body again (ir/verifier.h, KernelBodies::Trust).
  virtual bool leavesKernelBodies() const { return false; }
};

// A pass that rewrites each function of the module on its own: most passes are this.
class FunctionPass : public Pass {
 public:
  using Fn = bool (*)(Graph&);
  enum class Bodies { MayChange, Leaves };
  FunctionPass(std::string_view name, Fn fn, Bodies bodies = Bodies::MayChange)
      : name_(name), fn_(fn), bodies_(bodies) {}
  std::string_view name() const override { return name_; }
  bool leavesKernelBodies() const override { return bodies_ == Bodies::Leaves; }
  bool run(Module& m) override {
    bool changed = false;
    for (auto& f : m.funcs) changed |= fn_(*f);
    return changed;
  }

 private:
  std::string_view name_;
  Fn fn_;
  Bodies bodies_;
};

// The registry of every pass by name (passes/registry.cpp). Throws Error for an unknown name.
std::unique_ptr<Pass> createPass(std::string_view name);
std::vector<std::string> passNames();

std::unique_ptr<Pass> createDCEPass();
std::unique_ptr<Pass> createCSEPass();
std::unique_ptr<Pass> createCanonicalizePass();
// Sweeps canonicalize runs before it stops and warns that the IR still changes (its rules reach
// a fixed point in two: the second only checks); a smaller limit is for tests of that report.
constexpr int kCanonicalizeMaxSweeps = 16;
std::unique_ptr<Pass> createCanonicalizePass(int maxSweeps);
// Canonicalize's patterns, in the order it tries them (for --disable-pattern and the docs).
std::vector<std::string> canonicalizePatternNames();
std::unique_ptr<Pass> createDecomposePass();
std::unique_ptr<Pass> createDecomposeAttentionPass();
// decompose for the fused attention lowering: every composite but attention and
// attention_backward, which fuse turns into kernels of the `attention` family.
std::unique_ptr<Pass> createDecomposeKeepAttentionPass();
std::unique_ptr<Pass> createAutodiffPass();
std::unique_ptr<Pass> createAdamWPass();  // AdamWConfig's defaults
std::unique_ptr<Pass> createAdamWPass(const AdamWConfig& cfg);
// data-parallel (passes/data_parallel.h); registered with two ranks and the default buckets.
std::unique_ptr<Pass> createDataParallelPass();
std::unique_ptr<Pass> createDataParallelPass(const DataParallelConfig& cfg);
std::unique_ptr<Pass> createAutocastPass();
std::unique_ptr<Pass> createCacheWeightCastsPass();
std::unique_ptr<Pass> createShardMasterWeightsPass();
std::unique_ptr<Pass> createFusePass();
std::unique_ptr<Pass> createSchedulePass();
std::unique_ptr<Pass> createStepInvariantPass();
std::unique_ptr<Pass> createCompactPass();
std::unique_ptr<Pass> createMemoryPlanPass();
// memory-plan with the outputs a caller has written in place planned above the rest of the
// arena (passes/memory_plan.h): what the C interface compiles with.
std::unique_ptr<Pass> createMemoryPlanOutputsLastPass();
std::unique_ptr<Pass> createGemmLayoutPass();
std::unique_ptr<Pass> createMergeGemmsPass();
std::unique_ptr<Pass> createSplitReductionsPass();
std::unique_ptr<Pass> createWidenGemmOutputsPass();  // passes/widen_gemm.h

}  // namespace fusec
