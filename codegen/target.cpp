#include "codegen/target.h"

#include <cstdlib>

namespace fusec::codegen {

bool wgmmaAllowedByEnv() {
  const char* v = std::getenv("FUSEC_WGMMA");
  return !(v && std::string(v) == "0");
}

namespace {
bool switchByEnv(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  return v && std::string(v) == "1" ? true : v && std::string(v) == "0" ? false : fallback;
}
}  // namespace

void applyEnvSwitches(Target& t) {
  t.wgmmaProducer = switchByEnv("FUSEC_WGMMA_PRODUCER", t.wgmmaProducer);
  t.wgmmaProducerBackward = switchByEnv("FUSEC_WGMMA_PRODUCER_BWD", t.wgmmaProducerBackward);
  if (const char* v = std::getenv("FUSEC_WGMMA_FUSED_DQ"); v && (std::string(v) == "0" || std::string(v) == "1" || std::string(v) == "2"))
    t.wgmmaFusedDq = v[0] - '0';
  t.rowShared = switchByEnv("FUSEC_ROW_SHARED", t.rowShared);
}

Target offlineTarget() {
  Target t;
  t.wgmma = wgmmaAllowedByEnv();
  applyEnvSwitches(t);
  return t;
}

}  // namespace fusec::codegen
