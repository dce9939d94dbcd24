// The compiled side of `fusec bench attention`: @attention and @attention_backward as runtime
// Executables, one after the other (the forward's memory is released before the backward's
// is allocated, as two separate programs would run), timed with CUDA events on their stream.
// Their inputs and gradients are in the row's dtype (bf16 rows: bf16 q, k, v, grad_out, dq, dk,
// dv), as PyTorch's SDPA rows have them.
#include <algorithm>
#include <random>

#include "bench/attention_bench.h"
#include "bench/timer.h"
#include "frontend/models/attention.h"
#include "runtime/executable.h"

namespace fusec::bench {

namespace {

HostTensor randomTensor(const Type& t, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  HostTensor h = HostTensor::zeros(t);
  for (auto& x : h.f) x = u(rng);
  return h;
}

}  // namespace

AttentionRun runCompiledAttention(const AttentionCase& c, const codegen::CubinCache* cache, bool fused) {
  const AttentionLowering lowering = fused ? AttentionLowering::Fused : AttentionLowering::Naive;
  const DType dtype = c.dtype == "bf16" ? DType::bf16 : DType::f32;
  const Type t{DType::f32, {c.batch, c.seq, c.d}};
  std::mt19937 rng(0);
  Bindings env;
  for (const char* name : {"q", "k", "v", "grad_out"}) env[name] = randomTensor(t, rng);
  rt::ExecutableOptions opts;
  opts.cache = cache;
  AttentionRun r;
  int64_t peak = 0;
  for (const auto& program : models::attentionProgramNames()) {
    // Inputs in the row's dtype, as SDPA's rows get them (no cast kernels in the timing).
    auto m = models::compileAttentionProgram(program, c.batch, c.seq, c.d, lowering, dtype, dtype);
    rt::Executable exe(*m->funcs.front(), opts);
    exe.bind(env);
    const bool forward = program == "attention";
    (forward ? r.forwardMs : r.backwardMs) = timeOnStream([&] { exe.run(); }, exe.stream(), c.warmup, c.iters);
    exe.synchronize();
    if (forward) r.savedBytes = int64_t(exe.arenaBytes());
    peak = std::max(peak, int64_t(exe.arenaBytes() + exe.residentBytes()));
  }
  r.peakBytes = peak;
  return r;
}

}  // namespace fusec::bench
