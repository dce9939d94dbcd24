#include "codegen/target.h"

#include <cstdlib>

namespace fusec::codegen {

bool wgmmaAllowedByEnv() {
  const char* v = std::getenv("FUSEC_WGMMA");
  return !(v && std::string(v) == "0");
}

bool wgmmaProducerByEnv(bool fallback, bool backward) {
  const char* v = std::getenv(backward ? "FUSEC_WGMMA_PRODUCER_BWD" : "FUSEC_WGMMA_PRODUCER");
  return v && std::string(v) == "1" ? true : v && std::string(v) == "0" ? false : fallback;
}

Target offlineTarget() {
  Target t;
  t.wgmma = wgmmaAllowedByEnv();
  t.wgmmaProducer = wgmmaProducerByEnv(t.wgmmaProducer);
  t.wgmmaProducerBackward = wgmmaProducerByEnv(t.wgmmaProducerBackward, true);
  return t;
}

}  // namespace fusec::codegen
