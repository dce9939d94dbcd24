// Fuzz target: the .fir parser and verifier. Any input must either parse into a verified
// module or be refused with fusec::Error; and what parses must print as text that parses
// again into the same text (the printer and parser agree on every module the parser accepts).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "ir/error.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<fusec::Module> m;
  try {
    m = fusec::parseModule(text, "<fuzz>");
  } catch (const fusec::Error&) {
    return 0;  // a clean rejection
  }
  const std::string printed = fusec::printModule(*m);
  try {
    auto again = fusec::parseModule(printed, "<printed>");
    fusec::verify(*again);
    if (fusec::printModule(*again) != printed) {
      std::fprintf(stderr, "fir fuzz: printing is not stable across a round trip:\n%s\n", printed.c_str());
      std::abort();
    }
  } catch (const fusec::Error& e) {
    std::fprintf(stderr, "fir fuzz: the printed module does not parse back: %s\n%s\n", e.what(), printed.c_str());
    std::abort();
  }
  return 0;
}
