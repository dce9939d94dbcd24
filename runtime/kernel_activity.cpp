#include "runtime/kernel_activity.h"

#include <cstdlib>
#include <mutex>
#include <string>

#include "ir/error.h"

#ifdef FUSEC_HAVE_CUPTI
#include <cupti.h>
#endif

namespace fusec::rt {

#ifdef FUSEC_HAVE_CUPTI
namespace {

// The records CUPTI has handed back, whether some were lost or unusable since the last take()
// (a dropped record, a zero timestamp: CUPTI writes 0 when it runs out of device memory for
// them), and whether a KernelActivity exists.
std::mutex gMutex;
std::vector<KernelSpan> gSpans;
bool gLost = false;
bool gAlive = false;
bool gRegistered = false;

constexpr size_t kBufferBytes = size_t(8) << 20;  // about 38,000 kernel records of 216 bytes

void CUPTIAPI bufferRequested(uint8_t** buffer, size_t* size, size_t* maxNumRecords) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;  // no buffer: CUPTI drops the records (take() then sees too few)
  *maxNumRecords = 0;                   // as many as fit
}

// Called by CUPTI (in cuptiActivityFlushAll, or on its own thread): nothing may throw out of it.
void CUPTIAPI bufferCompleted(CUcontext context, uint32_t streamId, uint8_t* buffer, size_t, size_t validSize) {
  try {
    std::lock_guard<std::mutex> lock(gMutex);
    CUpti_Activity* record = nullptr;
    CUptiResult r;
    while ((r = cuptiActivityGetNextRecord(buffer, validSize, &record)) == CUPTI_SUCCESS)
      if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
        // The kernel record of the CUPTI this fusec was built with (its header's latest;
        // start and end sit at the same offsets in every version).
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        if (k->start == 0 || k->end == 0) gLost = true;
        else {
          const std::string name = k->name ? k->name : "";
          gSpans.push_back({k->start, k->end, isCommKernelName(name), k->streamId, name});
        }
      }
    if (r != CUPTI_ERROR_MAX_LIMIT_REACHED) gLost = true;  // an invalid record ends the buffer early
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(context, streamId, &dropped) != CUPTI_SUCCESS || dropped > 0) gLost = true;
  } catch (...) {
    std::lock_guard<std::mutex> lock(gMutex);
    gLost = true;
  }
  std::free(buffer);
}

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* s = nullptr;
  if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) s = "unknown error";
  throw Error(std::string("CUPTI ") + what + " failed: " + s);
}

}  // namespace

KernelActivity::KernelActivity() {
  {
    std::lock_guard<std::mutex> lock(gMutex);
    if (gAlive) throw Error("internal: a second KernelActivity while one is alive");
    gAlive = true;
  }
  try {
    // Once per process: CUPTI keeps the callbacks (registering again while buffers are out
    // is refused).
    if (!gRegistered) check(cuptiActivityRegisterCallbacks(bufferRequested, bufferCompleted), "registering buffers");
    gRegistered = true;
  } catch (...) {
    std::lock_guard<std::mutex> lock(gMutex);
    gAlive = false;
    throw;
  }
}

KernelActivity::~KernelActivity() {
  try {
    stop();
    take();
  } catch (...) {
  }
  std::lock_guard<std::mutex> lock(gMutex);
  gAlive = false;
}

void KernelActivity::start() { check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enabling kernel records"); }

void KernelActivity::stop() { check(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "disabling kernel records"); }

std::vector<KernelSpan> KernelActivity::take() {
  // Blocking: the buffers come back through bufferCompleted before it returns. The lock is
  // taken after it, never around it (bufferCompleted takes it too).
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flushing the records");
  std::lock_guard<std::mutex> lock(gMutex);
  std::vector<KernelSpan> out;
  out.swap(gSpans);
  const bool lost = gLost;
  gLost = false;
  if (lost) throw Error("CUPTI lost kernel records (dropped, or without timestamps)");
  return out;
}

#else

KernelActivity::KernelActivity() { throw Error("this fusec was built without CUPTI (the CUDA toolkit's profiling library)"); }
KernelActivity::~KernelActivity() = default;
void KernelActivity::start() {}
void KernelActivity::stop() {}
std::vector<KernelSpan> KernelActivity::take() { return {}; }

#endif

}  // namespace fusec::rt
