// Passes that declare they leave kernel bodies alone (Pass::leavesKernelBodies: the pass
// manager then verifies after them without walking the bodies, ir/verifier.h) really do: each
// runs on fused programs and every body prints the same after it. And the verifier, trusting
// bodies, still checks each kernel op against its body.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "api/compile.h"
#include "frontend/models/transformer.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/pass.h"

namespace fusec {
namespace {

// Every kernel body of the module, printed (each names its kernel), sorted: schedule moves
// kernels, not what is in them.
std::vector<std::string> bodies(const Module& m) {
  std::vector<std::string> out;
  for (const auto& f : m.funcs)
    for (const auto& op : f->ops)
      if (op->body) out.push_back(printGraph(*op->body));
  std::sort(out.begin(), out.end());
  return out;
}

// The tiny model's program, lowered up to and including fuse.
std::unique_ptr<Module> fused(const std::string& program, DType dtype) {
  auto m = std::make_unique<Module>();
  if (program == "forward")
    models::buildForward(*m, models::namedConfig("tiny"), 2, 8);
  else
    models::buildTrainLoss(*m, models::namedConfig("tiny"), 2, 8);
  const std::string all = defaultOptimizationPipeline();
  api::lowerProgram(*m, program, {.dtype = dtype, .passes = all.substr(0, all.find(",fuse,") + 5)});
  return m;
}

TEST(KernelBodies, PassesThatDeclareItLeaveEveryBodyAsItWas) {
  std::vector<std::string> declared;
  for (const std::string& name : passNames())
    if (createPass(name)->leavesKernelBodies()) declared.push_back(name);
  // The late passes of the default pipeline: with these trusted, bodies are walked once.
  for (const char* late : {"step-invariant", "schedule", "memory-plan", "memory-plan-outputs-last"})
    EXPECT_NE(std::find(declared.begin(), declared.end(), late), declared.end()) << late;
  for (const char* program : {"forward", "train_step"})
    for (DType dtype : {DType::f32, DType::bf16})
      for (const std::string& name : declared) {
        SCOPED_TRACE(std::string(program) + " " + std::string(dtypeName(dtype)) + ", pass " + name);
        std::unique_ptr<Module> m = fused(program, dtype);
        const std::vector<std::string> before = bodies(*m);
        ASSERT_FALSE(before.empty());
        createPass(name)->run(*m);
        EXPECT_EQ(bodies(*m), before);
        verify(*m);  // and the whole program still verifies, bodies included
      }
}

// Trusting bodies skips their walk, not the kernel op's own checks against its body.
TEST(KernelBodies, TrustingBodiesStillChecksEachKernelAgainstItsBody) {
  auto firstKernel = [](Module& m) -> Op* {
    for (auto& op : m.funcs.at(0)->ops)
      if (op->body && op->body->ops.size() >= 3) return op.get();
    return nullptr;
  };
  // A kernel whose result type disagrees with its body's output: refused either way.
  std::unique_ptr<Module> m = fused("forward", DType::f32);
  Op* k = firstKernel(*m);
  ASSERT_NE(k, nullptr);
  k->result()->type.shape.push_back(3);
  for (KernelBodies bodies : {KernelBodies::Trust, KernelBodies::Verify}) {
    std::string message;
    try {
      verify(*m, bodies);
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("body"), std::string::npos) << message;  // the kernel's own check, not its users'
  }

  // A body broken inside (two of its values named alike) under a kernel whose signature
  // agrees with it: walked, it is refused; trusted, only Debug builds walk it.
  m = fused("forward", DType::f32);
  k = firstKernel(*m);
  ASSERT_NE(k, nullptr);
  for (size_t i = 0; i < 2; ++i) k->body->ops[i]->result()->name = "twice";
  EXPECT_THROW(verify(*m), Error);
#ifdef NDEBUG
  EXPECT_NO_THROW(verify(*m, KernelBodies::Trust));
#else
  EXPECT_THROW(verify(*m, KernelBodies::Trust), Error);
#endif
}

}  // namespace
}  // namespace fusec
