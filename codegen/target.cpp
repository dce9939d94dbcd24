#include "codegen/target.h"

#include "support/env.h"

namespace fusec::codegen {

bool wgmmaAllowedByEnv() { return envSwitch("FUSEC_WGMMA", true); }

void applyEnvSwitches(Target& t) {
  t.wgmmaProducer = envSwitch("FUSEC_WGMMA_PRODUCER", t.wgmmaProducer);
  t.wgmmaProducerBackward = envSwitch("FUSEC_WGMMA_PRODUCER_BWD", t.wgmmaProducerBackward);
  t.wgmmaFusedDq = int(envCount("FUSEC_WGMMA_FUSED_DQ", t.wgmmaFusedDq, 2));
  t.rowShared = envSwitch("FUSEC_ROW_SHARED", t.rowShared);
  t.dependentLaunch = envSwitch("FUSEC_DEPENDENT_LAUNCH", t.dependentLaunch);
  t.wgmmaBackwardMinSeq = envCount("FUSEC_WGMMA_BWD_MIN_SEQ", t.wgmmaBackwardMinSeq, int64_t(1) << 31);
  t.wgmmaForwardMinSeq = envCount("FUSEC_WGMMA_FWD_MIN_SEQ", t.wgmmaForwardMinSeq, int64_t(1) << 31);
  t.shortBackwardMaxSeq = envCount("FUSEC_SHORT_BWD_MAX_SEQ", t.shortBackwardMaxSeq, int64_t(1) << 31);
  t.shortForwardMaxSeq = envCount("FUSEC_SHORT_FWD_MAX_SEQ", t.shortForwardMaxSeq, int64_t(1) << 31);
  t.shortForwardMinHeadsPerSm = int(envCount("FUSEC_SHORT_FWD_MIN_HEADS_PER_SM", t.shortForwardMinHeadsPerSm, 65535));
  t.shortBackwardDs = envSwitch("FUSEC_SHORT_BWD_DS", t.shortBackwardDs);
}

Target offlineTarget() {
  Target t;
  t.wgmma = wgmmaAllowedByEnv();
  applyEnvSwitches(t);
  return t;
}

}  // namespace fusec::codegen
