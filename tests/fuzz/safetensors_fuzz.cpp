// Fuzz target: the safetensors reader. Any bytes must either load or be refused with
// fusec::Error; and what loads must write back to bytes that load into the same bytes again
// (serialising is a fixed point after one round).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "frontend/safetensors.h"
#include "ir/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  fusec::SafetensorsMetadata meta;
  fusec::Bindings tensors;
  try {
    tensors = fusec::parseSafetensors(bytes, "<fuzz>", &meta);
  } catch (const fusec::Error&) {
    return 0;  // a clean rejection
  }
  try {
    const std::string once = fusec::serializeSafetensors(tensors, meta);
    fusec::SafetensorsMetadata meta2;
    const std::string twice = fusec::serializeSafetensors(fusec::parseSafetensors(once, "<written>", &meta2), meta2);
    if (once != twice) {
      std::fprintf(stderr, "safetensors fuzz: writing what was read is not a fixed point\n");
      std::abort();
    }
  } catch (const fusec::Error& e) {
    // Writing may refuse what reading accepted only for a stated reason; it must not be a
    // file we wrote ourselves that we then cannot read.
    const std::string what = e.what();
    if (what.find("<written>") != std::string::npos) {
      std::fprintf(stderr, "safetensors fuzz: a file fusec wrote does not load: %s\n", what.c_str());
      std::abort();
    }
  }
  return 0;
}
