// The fused (flash) attention programs on the GPU against LibTorch eager naive attention on
// the GPU (bench/eager_attention.h), the fused composite's correctness grid: causal, d 16, 32, 64, 128,
// N 1, 17, 256, 1000, 4096, fp32 and bf16, forward out and the three gradients dq, dk, dv.
// Norm-wise relative tolerances: fp32 1e-4; bf16 2e-2, against eager f32 attention on q, k, v
// and grad_out rounded to bf16 (what autocast hands the bf16 kernels). tests/gpu's
// FusedAttention checks the same kernels against the interpreter; this is the LibTorch side.
// Batch 2 (1 at N 4096), the shapes of that test, so that the two share cached cubins.
// Label `eager` with the other LibTorch comparisons; skips with a reason without a device or
// without LibTorch CUDA.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "bench/eager_attention.h"
#include "bench/eager_model.h"
#include "codegen/cubin_cache.h"
#include "frontend/models/attention.h"
#include "runtime/device.h"
#include "runtime/executable.h"
#include "test_util.h"

namespace fusec {
namespace {

// The program's outputs for `env` (the Executable's first, direct call).
std::vector<HostTensor> runFused(const std::string& program, const Bindings& env, int64_t batch, int64_t n, int64_t d,
                                 DType dt, const codegen::CubinCache& cache) {
  auto m = models::compileAttentionProgram(program, batch, n, d, AttentionLowering::Fused, dt);
  const Graph& g = *m->funcs.at(0);
  rt::ExecutableOptions opts;
  opts.cache = &cache;
  rt::Executable exe(g, opts);
  Bindings mine;
  for (Op* in : g.inputs()) mine[in->attrStr("name")] = env.at(in->attrStr("name"));
  exe.bind(mine);
  exe.run();
  exe.synchronize();
  std::vector<HostTensor> out;
  for (size_t i = 0; i < g.outputs.size(); ++i) out.push_back(exe.output(i));
  return out;
}

HostTensor roundedToBf16(HostTensor t) {
  for (float& x : t.f) x = roundToBF16(x);
  return t;
}

TEST(FusedAttentionVsEager, CausalGridBothDtypes) {
  std::string why;
  if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  if (!bench::torchCudaAvailable(&why)) GTEST_SKIP() << why;
  codegen::CubinCache cache(codegen::CubinCache::defaultDir());
  uint32_t seed = 1;
  for (DType dt : {DType::f32, DType::bf16})
    for (int64_t d : {16, 32, 64, 128})
      for (int64_t n : {1, 17, 256, 1000, 4096}) {
        const int64_t batch = n >= 4096 ? 1 : 2;
        std::mt19937 rng(seed++);
        const Type t{DType::f32, {batch, n, d}};
        Bindings env;
        for (const char* name : {"q", "k", "v", "grad_out"}) env[name] = test::randomNonZero(t, rng);
        Bindings ref = env;
        if (dt == DType::bf16)
          for (auto& [name, x] : ref) x = roundedToBf16(x);
        bench::AttentionResult want = bench::eagerAttention(ref["q"], ref["k"], ref["v"], ref["grad_out"], {"cuda", 0});
        auto fwd = runFused("attention", env, batch, n, d, dt, cache);
        auto bwd = runFused("attention_backward", env, batch, n, d, dt, cache);
        ASSERT_EQ(fwd.size(), 1u);
        ASSERT_EQ(bwd.size(), 3u);
        const double tol = dt == DType::f32 ? 1e-4 : 2e-2;
        const double errs[] = {test::normRelError(fwd[0], want.out), test::normRelError(bwd[0], want.dq),
                               test::normRelError(bwd[1], want.dk), test::normRelError(bwd[2], want.dv)};
        std::printf("fused vs eager %s d=%-3lld N=%-5lld: out %.2e dq %.2e dk %.2e dv %.2e\n",
                    std::string(dtypeName(dt)).c_str(), (long long)d, (long long)n, errs[0], errs[1], errs[2], errs[3]);
        const char* names[] = {"out", "dq", "dk", "dv"};
        for (int i = 0; i < 4; ++i)
          EXPECT_LE(errs[i], tol) << names[i] << " " << dtypeName(dt) << " d " << d << " N " << n;
      }
}

}  // namespace
}  // namespace fusec
