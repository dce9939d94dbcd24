// CUPTI's entry points that fusec calls (runtime/kernel_activity.cpp), each forwarding to the
// real function of libcupti, opened at the first call (codegen/lazy_library.h says why). The
// signatures are cupti_activity.h's and cupti_result.h's; a function fusec starts calling needs
// its line here, or the link fails.
#include <cupti.h>

#include "codegen/lazy_library.h"

namespace {
FUSEC_LAZY_LIBRARY(FUSEC_CUPTI_SONAME, FUSEC_CUPTI_PATH)
}  // namespace

extern "C" {

CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc funcBufferRequested,
                                                    CUpti_BuffersCallbackCompleteFunc funcBufferCompleted) {
  return lazyCall<&cuptiActivityRegisterCallbacks>(library(), "cuptiActivityRegisterCallbacks", funcBufferRequested,
                                                   funcBufferCompleted);
}
CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind) {
  return lazyCall<&cuptiActivityEnable>(library(), "cuptiActivityEnable", kind);
}
CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind) {
  return lazyCall<&cuptiActivityDisable>(library(), "cuptiActivityDisable", kind);
}
CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag) {
  return lazyCall<&cuptiActivityFlushAll>(library(), "cuptiActivityFlushAll", flag);
}
CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t* buffer, size_t validBufferSizeBytes, CUpti_Activity** record) {
  return lazyCall<&cuptiActivityGetNextRecord>(library(), "cuptiActivityGetNextRecord", buffer, validBufferSizeBytes,
                                               record);
}
CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t streamId, size_t* dropped) {
  return lazyCall<&cuptiActivityGetNumDroppedRecords>(library(), "cuptiActivityGetNumDroppedRecords", context, streamId,
                                                      dropped);
}
CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char** str) {
  return lazyCall<&cuptiGetResultString>(library(), "cuptiGetResultString", result, str);
}

}  // extern "C"
