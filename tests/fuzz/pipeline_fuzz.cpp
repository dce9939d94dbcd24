// Fuzz target: the default optimisation pipeline on parsed input. A module that parses and
// verifies goes through every pass of passes/pipeline.h's defaultOptimizationPipeline() (either
// memory plan), one by one; a pass may refuse it with fusec::Error, but it must never crash, and what it
// returns must verify: no pass turns valid IR invalid.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ir/error.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/pass.h"
#include "passes/pipeline.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Big inputs spend the time in the passes' (linear) work, not in new paths.
  if (size > 16384) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<fusec::Module> m;
  try {
    m = fusec::parseModule(text, "<fuzz>");
  } catch (const fusec::Error&) {
    return 0;
  }
  // Half the inputs (by length) end with the C interface's plan (memory-plan-outputs-last).
  std::stringstream names(fusec::defaultOptimizationPipeline(size % 2 == 1));
  for (std::string name; std::getline(names, name, ',');) {
    const std::string before = fusec::printModule(*m);
    try {
      fusec::createPass(name)->run(*m);
    } catch (const fusec::Error&) {
      return 0;  // the pass refused this module, with a reason
    }
    try {
      fusec::verify(*m);
    } catch (const fusec::Error& e) {
      std::fprintf(stderr, "pipeline fuzz: %s turned valid IR invalid: %s\n--- before\n%s", name.c_str(), e.what(),
                   before.c_str());
      std::abort();
    }
  }
  return 0;
}
