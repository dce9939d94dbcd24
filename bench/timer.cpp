#include "bench/timer.h"

#include <cuda_runtime_api.h>

#include "runtime/device.h"

namespace fusec::bench {

namespace {

// A cudaEvent_t destroyed on scope exit, so a throwing `fn` leaks nothing.
struct Event {
  cudaEvent_t e = nullptr;
  Event() { FUSEC_CUDA(cudaEventCreate(&e), "benchmark timer"); }
  ~Event() { cudaEventDestroy(e); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

}  // namespace

std::vector<double> timeOnStream(const std::function<void()>& fn, void* streamPtr, int warmup, int iters,
                                 const std::function<void()>& before) {
  auto stream = static_cast<cudaStream_t>(streamPtr);
  for (int i = 0; i < warmup; ++i) {
    if (before) before();
    fn();
    FUSEC_CUDA(cudaStreamSynchronize(stream), "benchmark warm-up");
  }
  Event start, stop;
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    if (before) before();
    FUSEC_CUDA(cudaEventRecord(start.e, stream), "benchmark timer");
    fn();
    FUSEC_CUDA(cudaEventRecord(stop.e, stream), "benchmark timer");
    FUSEC_CUDA(cudaEventSynchronize(stop.e), "benchmark iteration");
    float t = 0;
    FUSEC_CUDA(cudaEventElapsedTime(&t, start.e, stop.e), "benchmark timer");
    ms.push_back(double(t));
  }
  return ms;
}

}  // namespace fusec::bench
