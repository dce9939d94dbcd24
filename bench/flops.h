// Model FLOPs of the CS336 TransformerLM: the work the model needs, independent of how an
// implementation schedules it, so that model FLOP utilisation (MFU) compares eager and
// compiled fairly (the same numerator for both).
#pragma once
#include <cstdint>
#include <string>

#include "frontend/models/transformer.h"

namespace fusec::bench {

enum class BenchPass { Forward, FwdBwd, Step };

// "forward" | "fwd_bwd" | "step"; throws Error for anything else.
BenchPass parsePass(const std::string& name);
const char* passName(BenchPass);

// Model FLOPs per token at sequence length `seq` (see flops.cpp for the formula).
double modelFlopsPerToken(const models::ModelConfig& cfg, int64_t seq, BenchPass pass);

}  // namespace fusec::bench
