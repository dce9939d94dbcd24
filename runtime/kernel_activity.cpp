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

// The records CUPTI has handed back, and whether a KernelActivity exists.
std::mutex gMutex;
std::vector<KernelSpan> gSpans;
bool gAlive = false;
bool gRegistered = false;

constexpr size_t kBufferBytes = size_t(8) << 20;  // about 50,000 kernel records

void CUPTIAPI bufferRequested(uint8_t** buffer, size_t* size, size_t* maxNumRecords) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;  // no buffer: CUPTI drops the records (take() then sees too few)
  *maxNumRecords = 0;                   // as many as fit
}

void CUPTIAPI bufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t validSize) {
  {
    std::lock_guard<std::mutex> lock(gMutex);
    CUpti_Activity* record = nullptr;
    while (cuptiActivityGetNextRecord(buffer, validSize, &record) == CUPTI_SUCCESS)
      if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
        // The kernel record of the CUPTI this fusec was built with (its header's latest).
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        gSpans.push_back({k->start, k->end});
      }
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
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flushing the records");
  std::lock_guard<std::mutex> lock(gMutex);
  std::vector<KernelSpan> out;
  out.swap(gSpans);
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
