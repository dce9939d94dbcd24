// Model FLOPs of the CS336 TransformerLM: the work the model needs, independent of how an
// implementation schedules it, so that model FLOP utilisation (MFU) compares eager and
// compiled fairly (the same numerator for both).
#pragma once
#include <cstdint>
#include <string>

#include "frontend/models/transformer.h"
#include "ir/graph.h"

namespace fusec::bench {

enum class BenchPass { Forward, FwdBwd, Step };

// "forward" | "fwd_bwd" | "step"; throws Error for anything else.
BenchPass parsePass(const std::string& name);
const char* passName(BenchPass);

// Model FLOPs per token at sequence length `seq` (see flops.cpp for the formula).
double modelFlopsPerToken(const models::ModelConfig& cfg, int64_t seq, BenchPass pass);

// The same count on a traced forward (any model): 2 M N K per matmul and, per attention,
// Q K^T and P V in full (2 Tq Tk d + 2 Tq Tk dv per batch index, the mask not halving it).
// On a zoo transformer's forward it equals the formula times the tokens.
double forwardFlops(const Graph& forward);

}  // namespace fusec::bench
