// Generates random valid graphs for property tests: every op in the table is tried with
// random operands and attributes, and the Builder's type rules filter out bad combinations,
// so whatever comes out is valid by construction (the verifier re-checks).
#pragma once
#include <memory>
#include <random>

#include "ir/graph.h"

namespace fusec::gen {

struct RandomGraphOptions {
  int ops = 24;               // ops to add per function
  int maxKernelDepth = 2;     // nesting of kernel bodies
  bool allowComposite = true;
  bool allowKernels = true;
  bool oddAttributes = true;  // NaN/inf/tiny floats, odd strings
};

std::unique_ptr<Module> randomModule(uint64_t seed, const RandomGraphOptions& opts = {});

}  // namespace fusec::gen
