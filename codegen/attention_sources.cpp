#include "codegen/attention_sources.h"

#include "codegen/attention_common_cuh.h"
#include "codegen/attention_mma_cuh.h"
#include "codegen/attention_simt_cuh.h"
#include "codegen/attention_wgmma_cuh.h"

namespace fusec::codegen {

const char* attentionCommonSource() { return embedded::attention_common; }
const char* attentionSimtSource() { return embedded::attention_simt; }
const char* attentionMmaSource() { return embedded::attention_mma; }
const char* attentionWgmmaSource() { return embedded::attention_wgmma; }

}  // namespace fusec::codegen
