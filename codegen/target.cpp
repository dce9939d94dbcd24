#include "codegen/target.h"

#include <cstdlib>

#include "ir/error.h"

namespace fusec::codegen {

namespace {
// The value of the variable `name`: unset is `fallback`, a whole number from 0 to `max` (decimal
// digits only) that number; anything else is an error, so that a mistyped switch
// (FUSEC_ROW_SHARED=yes) is not silently the default.
int64_t countByEnv(const char* name, int64_t fallback, int64_t max) {
  const char* v = std::getenv(name);
  if (!v) return fallback;
  const std::string s(v);
  int64_t n = 0;
  bool ok = !s.empty();
  for (char c : s) {
    ok = ok && c >= '0' && c <= '9' && c - '0' <= max && n <= (max - (c - '0')) / 10;  // n * 10 + digit <= max
    if (ok) n = n * 10 + (c - '0');
  }
  if (!ok)
    throw Error(std::string(name) + " must be " + (max == 1 ? "0 or 1" : "a whole number from 0 to " + std::to_string(max)) +
                ", got '" + s + "'");
  return n;
}
bool switchByEnv(const char* name, bool fallback) { return countByEnv(name, fallback ? 1 : 0, 1) != 0; }
}  // namespace

bool wgmmaAllowedByEnv() { return switchByEnv("FUSEC_WGMMA", true); }

void applyEnvSwitches(Target& t) {
  t.wgmmaProducer = switchByEnv("FUSEC_WGMMA_PRODUCER", t.wgmmaProducer);
  t.wgmmaProducerBackward = switchByEnv("FUSEC_WGMMA_PRODUCER_BWD", t.wgmmaProducerBackward);
  t.wgmmaFusedDq = int(countByEnv("FUSEC_WGMMA_FUSED_DQ", t.wgmmaFusedDq, 2));
  t.rowShared = switchByEnv("FUSEC_ROW_SHARED", t.rowShared);
  t.dependentLaunch = switchByEnv("FUSEC_DEPENDENT_LAUNCH", t.dependentLaunch);
  t.wgmmaBackwardMinSeq = countByEnv("FUSEC_WGMMA_BWD_MIN_SEQ", t.wgmmaBackwardMinSeq, int64_t(1) << 31);
  t.wgmmaForwardMinSeq = countByEnv("FUSEC_WGMMA_FWD_MIN_SEQ", t.wgmmaForwardMinSeq, int64_t(1) << 31);
  t.shortBackwardMaxSeq = countByEnv("FUSEC_SHORT_BWD_MAX_SEQ", t.shortBackwardMaxSeq, int64_t(1) << 31);
  t.shortForwardMaxSeq = countByEnv("FUSEC_SHORT_FWD_MAX_SEQ", t.shortForwardMaxSeq, int64_t(1) << 31);
  t.shortForwardMinHeadsPerSm = int(countByEnv("FUSEC_SHORT_FWD_MIN_HEADS_PER_SM", t.shortForwardMinHeadsPerSm, 65535));
  t.shortBackwardDs = switchByEnv("FUSEC_SHORT_BWD_DS", t.shortBackwardDs);
}

Target offlineTarget() {
  Target t;
  t.wgmma = wgmmaAllowedByEnv();
  applyEnvSwitches(t);
  return t;
}

}  // namespace fusec::codegen
