#include "codegen/target.h"

#include <cstdlib>

#include "ir/error.h"

namespace fusec::codegen {

namespace {
// The value of the variable `name`: unset is `fallback`, "0" to "max" that number; anything
// else is an error, so that a mistyped switch (FUSEC_ROW_SHARED=yes) is not silently the default.
int choiceByEnv(const char* name, int fallback, int max) {
  const char* v = std::getenv(name);
  if (!v) return fallback;
  const std::string s(v);
  if (s.size() == 1 && s[0] >= '0' && s[0] - '0' <= max) return s[0] - '0';
  throw Error(std::string(name) + " must be " + (max == 1 ? "0 or 1" : "0 to " + std::to_string(max)) + ", got '" + s + "'");
}
bool switchByEnv(const char* name, bool fallback) { return choiceByEnv(name, fallback ? 1 : 0, 1) != 0; }
// A decimal count in [0, 2^31], or `fallback` when unset.
int64_t countByEnv(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (!v) return fallback;
  const std::string s(v);
  int64_t n = 0;
  bool ok = !s.empty() && s.size() <= 10;
  for (char c : s) {
    ok = ok && c >= '0' && c <= '9';
    if (ok) n = n * 10 + (c - '0');
  }
  if (!ok || n > (int64_t(1) << 31)) throw Error(std::string(name) + " must be a count from 0 to 2^31, got '" + s + "'");
  return n;
}
}  // namespace

bool wgmmaAllowedByEnv() { return switchByEnv("FUSEC_WGMMA", true); }

void applyEnvSwitches(Target& t) {
  t.wgmmaProducer = switchByEnv("FUSEC_WGMMA_PRODUCER", t.wgmmaProducer);
  t.wgmmaProducerBackward = switchByEnv("FUSEC_WGMMA_PRODUCER_BWD", t.wgmmaProducerBackward);
  t.wgmmaFusedDq = choiceByEnv("FUSEC_WGMMA_FUSED_DQ", t.wgmmaFusedDq, 2);
  t.rowShared = switchByEnv("FUSEC_ROW_SHARED", t.rowShared);
  t.wgmmaBackwardMinSeq = countByEnv("FUSEC_WGMMA_BWD_MIN_SEQ", t.wgmmaBackwardMinSeq);
}

Target offlineTarget() {
  Target t;
  t.wgmma = wgmmaAllowedByEnv();
  applyEnvSwitches(t);
  return t;
}

}  // namespace fusec::codegen
