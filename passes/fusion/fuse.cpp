// The fuse pass: every non-GEMM compute op into a `kernel` op of one family (see
// docs/pipeline.md "After fuse"). Planning (plan.cpp: what is recomputed, what stays at top
// level, which ops share a kernel) is separate from the rewrite (outline.cpp).
#include "passes/fusion/attention_output.h"
#include "passes/fusion/outline.h"
#include "passes/fusion/plan.h"
#include "passes/pass.h"

namespace fusec {
namespace {

bool fuseGraph(Graph& g) {
  const bool rewired = fusion::readAttentionOutputThroughPermute(g);
  fusion::Plan plan = fusion::planFusion(g);
  if (!plan.changes) return rewired;
  fusion::outline(g, plan);
  return true;
}

}  // namespace

std::unique_ptr<Pass> createFusePass() { return std::make_unique<FunctionPass>("fuse", &fuseGraph); }

}  // namespace fusec
