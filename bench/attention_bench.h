// `fusec bench attention`: naive causal attention (frontend/models/attention.h) across head
// dimensions and sequence lengths, eager LibTorch against the compiled @attention and
// @attention_backward programs, as the CS336 attention benchmark tabulates it: forward time,
// backward time, memory saved for backward, peak memory, OK or OOM per implementation.
//
// The sweep's bookkeeping (rows, OOM rows, progress, formats) is CPU code tested with stand-in
// runners; the real runners are runEagerAttention (LibTorch, bench/attention_bench_eager.cpp)
// and runCompiledAttention (rt::Executable, bench/attention_bench_compiled.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/report.h"
#include "bench/stats.h"
#include "codegen/cubin_cache.h"
#include "ir/graph.h"

namespace fusec::bench {

struct AttentionCase {
  int64_t batch = 8, d = 64, seq = 1024;
  int warmup = 5, iters = 10;
  std::string dtype = "fp32";  // fp32 | bf16 (q, k, v and the outputs in bf16, softmax statistics f32)
};

// What one implementation measured for one shape.
struct AttentionRun {
  std::vector<double> forwardMs, backwardMs;
  // Eager: the P matrix autograd keeps ([B, N, N] f32); compiled: the forward program's
  // arena (its backward recomputes P from q, k, v, so nothing else is kept between them).
  std::optional<int64_t> savedBytes;
  // Eager: the caching allocator's peak (a CUDA LibTorch only); compiled: the larger of the
  // two programs' arena + resident region.
  std::optional<int64_t> peakBytes;
};

using AttentionRunner = std::function<AttentionRun(const AttentionCase&)>;

struct AttentionRow {
  int64_t batch = 0, d = 0, seq = 0;
  std::string dtype = "fp32";
  std::string impl;           // eager | compiled (naive) | fused | sdpa-* (--vs-torch)
  std::string status = "OK";  // OK | OOM | the error's text (statusFromError)
  std::optional<Stats> forwardMs, backwardMs;
  std::optional<int64_t> savedBytes, peakBytes;
};

struct AttentionSweep {
  int64_t batch = 8;
  std::vector<int64_t> ds = {16, 32, 64, 128}, seqs = {256, 1024, 4096, 8192, 16384};
  int warmup = 5, iters = 10;
  std::vector<std::string> impls = {"eager", "compiled"};  // keys of the runners, in row order
  std::vector<std::string> dtypes = {"fp32"};
};

// FlashAttention's FLOP count of causal attention: forward 4 B N^2 d / 2 (two GEMMs, half
// the scores masked), backward 2.5 times the forward.
double causalForwardFlops(int64_t batch, int64_t seq, int64_t d);

// Every (dtype, d, seq, impl) in that nesting order. A runner that throws gives its row the status
// statusFromError(message) and the sweep goes on. `progress` (may be null) gets a line per row.
std::vector<AttentionRow> runAttentionSweep(const AttentionSweep& s, const std::map<std::string, AttentionRunner>& runners,
                                            std::ostream* progress);

// Table (markdown, with a footnote on what the backward and memory columns mean), JSON (one
// object per line, every key on every row) or CSV.
std::string formatAttentionRows(const std::vector<AttentionRow>& rows, Format format);

// Parses one JSON row as formatAttentionRows(..., Json) writes it: the rows of
// bench/torch_sdpa_ref.py (`--vs-torch`). Every key must be present; times keep their median
// and standard deviation. Throws Error naming the key at fault.
AttentionRow parseAttentionJsonRow(const std::string& line);

// Inserts each of `extra` after the last row of `rows` with its (dtype, d, seq), keeping their
// order; a row with no such shape goes at the end.
void mergeAttentionRows(std::vector<AttentionRow>& rows, const std::vector<AttentionRow>& extra);

// The real runners (GPU; both throw Error, "out of memory" ones becoming OOM rows).
AttentionRun runEagerAttention(const AttentionCase& c);
// `fused`: the fused lowering (flash-attention kernels), else the naive one (the seeds').
AttentionRun runCompiledAttention(const AttentionCase& c, const codegen::CubinCache* cache, bool fused = false);

}  // namespace fusec::bench
