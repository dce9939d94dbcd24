// The attention programs on the GPU over the CS336 seed grid: batch 8, d 16, 32,
// 64, 128, N 256, 1024, 4096, 8192, 16384. For each shape, `attention` and
// `attention_backward` are compiled (frontend/models/attention.h), run with rt::Executable on
// random non-zero q, k, v, grad_out, and compared with LibTorch eager naive attention on the
// GPU (bench/eager_attention.h): out, dq, dk, dv within 1e-4 norm-wise relative, after the
// first (direct) call and after a replay of the captured CUDA graph. Before the replay, the
// input the outputs are linear in (v for the forward, grad_out for the backward) is rebound
// doubled, so a replay that computed nothing would read half the expected values (doubling
// is exact in floating point, so the reference is exactly twice the eager one). A shape whose program does
// not fit passes only when the Executable's constructor reports exactly
// "out of GPU memory: needs X GiB, Y GiB free". One line per shape is printed.
//
// The eager reference runs in batch chunks small enough that its [chunk, N, N] intermediates
// (about six of them in its backward) stay within a few GiB: attention is independent per
// batch element, so the result is the same, and the reference itself never runs out. Host
// memory per shape is a dozen [8, N, d] tensors (64 MiB each at N 16384, d 128); the [N, N]
// matrices live on the GPU only.
//
// Built with LibTorch and the runtime (tests/torch/gpu/CMakeLists.txt); like the other eager
// comparisons on the GPU it is labelled `eager` and runs serially (it holds up to 24 GiB of
// arena plus LibTorch's chunk), and it skips with a reason where there is no device or
// LibTorch has no CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <tuple>

#include "bench/eager_attention.h"
#include "bench/eager_model.h"
#include "codegen/cubin_cache.h"
#include "frontend/models/attention.h"
#include "runtime/device.h"
#include "runtime/executable.h"
#include "test_util.h"

namespace fusec {
namespace {

constexpr int64_t kBatch = 8;
constexpr double kTolerance = 1e-4;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

bool isOutOfMemoryError(const std::string& msg) {
  static const std::regex form(R"(out of GPU memory: needs [0-9]+\.[0-9]{2} GiB, [0-9]+\.[0-9]{2} GiB free)");
  return std::regex_match(msg, form);
}

// One compiled program run on the GPU: its outputs after the first call (direct launches) and,
// with `doubled` bound to twice its value, after the third (a replay of the CUDA graph
// captured by the second); or the Executable's OOM message.
struct GpuResult {
  std::string oom;
  std::vector<HostTensor> first, replayed;
  size_t arenaBytes = 0;
};

GpuResult runCompiled(const std::string& program, const Bindings& env, const std::string& doubled, int64_t N,
                      int64_t d, const codegen::CubinCache& cache) {
  auto m = models::compileAttentionProgram(program, kBatch, N, d);
  const Graph& g = *m->funcs.at(0);
  GpuResult r;
  std::unique_ptr<rt::Executable> exe;
  try {
    rt::ExecutableOptions opts;
    opts.cache = &cache;
    exe = std::make_unique<rt::Executable>(g, opts);
  } catch (const Error& e) {
    if (!isOutOfMemoryError(e.what())) throw;
    r.oom = e.what();
    return r;
  }
  r.arenaBytes = exe->arenaBytes();
  EXPECT_EQ(exe->bind(env), g.inputs().size()) << program;
  auto outputs = [&] {
    std::vector<HostTensor> out;
    for (size_t i = 0; i < g.outputs.size(); ++i) out.push_back(exe->output(i));
    return out;
  };
  exe->run();
  exe->synchronize();
  r.first = outputs();
  HostTensor twice = env.at(doubled);
  for (float& x : twice.f) x *= 2;
  exe->bind(doubled, twice);
  exe->run();
  exe->run();
  exe->synchronize();
  EXPECT_TRUE(exe->graphCaptured()) << program;
  r.replayed = outputs();
  return r;
}

// Worst norm-wise relative error of a run's outputs against the references: the first call's
// against `want`, the replay's against twice `want`.
double worstError(const GpuResult& r, const std::vector<const HostTensor*>& want) {
  double worst = 0;
  for (const auto* outs : {&r.first, &r.replayed}) {
    const float scale = outs == &r.first ? 1.f : 2.f;
    EXPECT_EQ(outs->size(), want.size());
    for (size_t i = 0; i < std::min(outs->size(), want.size()); ++i) {
      EXPECT_EQ((*outs)[i].type, want[i]->type);
      if ((*outs)[i].type != want[i]->type) continue;
      HostTensor expected = *want[i];
      for (float& x : expected.f) x *= scale;
      worst = std::max(worst, test::normRelError((*outs)[i], expected));
    }
  }
  return worst;
}

// Batch elements per eager chunk: about 4 GiB of [chunk, N, N] f32 intermediates (6 of them).
int64_t eagerChunk(int64_t N) {
  const double perElement = 6.0 * double(N) * double(N) * 4;
  return std::clamp<int64_t>(int64_t(4 * kGiB / perElement), 1, kBatch);
}

std::string describe(const std::string& program, const GpuResult& r, double err) {
  char buf[256];
  if (!r.oom.empty()) std::snprintf(buf, sizeof buf, "%s OOM (%s)", program.c_str(), r.oom.c_str());
  else std::snprintf(buf, sizeof buf, "%s err %.2e arena %.2f GiB", program.c_str(), err, double(r.arenaBytes) / kGiB);
  return buf;
}

class AttentionSeedGrid : public ::testing::TestWithParam<std::tuple<int64_t, int64_t>> {};

TEST_P(AttentionSeedGrid, MatchesEagerOrReportsOutOfMemory) {
  std::string why;
  if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  if (!bench::torchCudaAvailable(&why)) GTEST_SKIP() << why;
  const auto [d, N] = GetParam();

  std::mt19937 rng(uint32_t(N * 1000 + d));
  const Type t{DType::f32, {kBatch, N, d}};
  Bindings env;
  for (const char* n : {"q", "k", "v", "grad_out"}) env[n] = test::randomNonZero(t, rng);

  // The compiled programs first, each Executable freed before the next; then the reference.
  codegen::CubinCache cache(codegen::CubinCache::defaultDir());
  Bindings fwdEnv = env;
  fwdEnv.erase("grad_out");
  GpuResult fwd = runCompiled("attention", fwdEnv, "v", N, d, cache);
  GpuResult bwd = runCompiled("attention_backward", env, "grad_out", N, d, cache);
  bench::AttentionResult ref =
      bench::eagerAttention(env["q"], env["k"], env["v"], env["grad_out"], {"cuda", eagerChunk(N)});

  const double fwdErr = fwd.oom.empty() ? worstError(fwd, {&ref.out}) : 0;
  const double bwdErr = bwd.oom.empty() ? worstError(bwd, {&ref.dq, &ref.dk, &ref.dv}) : 0;
  std::printf("attention B%lld d%lld N%lld: %s | %s | eager saves P %.2f GiB for backward\n", (long long)kBatch,
              (long long)d, (long long)N, describe("forward", fwd, fwdErr).c_str(),
              describe("backward", bwd, bwdErr).c_str(), double(models::savedForBackwardBytes(kBatch, N)) / kGiB);
  EXPECT_LE(fwdErr, kTolerance) << "forward out, d " << d << " N " << N;
  EXPECT_LE(bwdErr, kTolerance) << "backward dq/dk/dv, d " << d << " N " << N;
}

INSTANTIATE_TEST_SUITE_P(SeedGrid, AttentionSeedGrid,
                         ::testing::Combine(::testing::Values(16, 32, 64, 128),
                                            ::testing::Values(256, 1024, 4096, 8192, 16384)),
                         [](const auto& info) {
                           return "d" + std::to_string(std::get<0>(info.param)) + "_N" +
                                  std::to_string(std::get<1>(info.param));
                         });

// The OOM form the grid accepts is exactly the Executable's: device.h words it.
TEST(AttentionSeedGridOom, AcceptsOnlyTheExecutablesMessage) {
  EXPECT_TRUE(isOutOfMemoryError(rt::outOfMemoryMessage(size_t(25) << 30, size_t(3) << 29)));
  EXPECT_FALSE(isOutOfMemoryError("CUDA cudaMalloc failed in allocating the arena: out of memory"));
  EXPECT_FALSE(isOutOfMemoryError("out of GPU memory: needs 2.00 GiB, 1.00 GiB free (and more)"));
}

}  // namespace
}  // namespace fusec
