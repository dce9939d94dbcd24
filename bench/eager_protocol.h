// The eager LibTorch baseline runs in an executable of its own, fusec-eager
// (tools/fusec_eager), so that fusec itself links no LibTorch: it starts in milliseconds and
// builds without the LibTorch translation units. `fusec bench` starts fusec-eager once per
// eager row; this is what the two say to each other, LibTorch-free on both ends.
//
//   fusec-eager model --model small --vocab 10000 ... --batch 4 --ctx 256 --dtype bf16 ...
//   fusec-eager attention --batch 8 --d 64 --seq 1024 --dtype fp32 --warmup 5 --iters 10
//
// Arguments are `--key value` pairs that carry the whole case (the model's sizes, not only its
// name; the seed the weights and tokens are drawn from), so the worker rebuilds the very
// inputs the compiled rows use (benchInputs). The worker answers one JSON line on stdout: the
// run's times and memory, or {"error": "..."} (a CUDA OOM among them), and exits 0; it exits
// non-zero only when it was called wrongly.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bench/attention_bench.h"
#include "bench/bench_case.h"

namespace fusec::bench {

// The worker's arguments (after its program name) for a zoo model's row. Throws Error for an
// imported model: its eager rows are its own PyTorch module's (bench/torch_module_ref.py).
std::vector<std::string> eagerModelArgs(const BenchCase& c, uint64_t seed);
std::vector<std::string> eagerAttentionArgs(const AttentionCase& c);

// The worker's side: `args` as the functions above write them, back into a case. Throws
// Error naming an unknown, repeated, missing or malformed key.
struct EagerModelCase {
  BenchCase c;
  uint64_t seed = 0;
};
EagerModelCase parseEagerModelArgs(const std::vector<std::string>& args);
AttentionCase parseEagerAttentionArgs(const std::vector<std::string>& args);

// The answer, one line of JSON each way.
std::string timedRunJson(const TimedRun& r);
std::string attentionRunJson(const AttentionRun& r);
std::string eagerErrorJson(const std::string& message);
// Throws Error(message) for an error answer, and Error for a line that is not an answer.
TimedRun parseTimedRunJson(const std::string& line);
AttentionRun parseAttentionRunJson(const std::string& line);

}  // namespace fusec::bench
