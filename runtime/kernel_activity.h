// Every kernel's start and end on the device, from CUPTI's activity records: how Nsight
// Systems times kernels, inside a CUDA graph as well, with nothing added between them. CUDA
// events around each launch cost about 2.4 us a launch on an H200 (one by one or recorded
// inside a graph alike: bench/RESULTS.md), which is 10-20% of the 15-25 us kernels of a
// medium-sized step. libcupti is opened at the first use (codegen/lazy_library.h), so a fusec
// without it starts and runs; only this reports that it is missing.
#pragma once
#include <vector>

#include "runtime/kernel_spans.h"

namespace fusec::rt {

// One at a time in a process (CUPTI's buffers and callbacks are process-wide).
class KernelActivity {
 public:
  // Opens CUPTI and hands it the record buffers; records nothing until start(). Throws Error
  // (one line) when it cannot: a fusec built without CUPTI, no libcupti, another
  // KernelActivity alive, or CUPTI refusing (another profiler holds it: nsys, ncu).
  KernelActivity();
  ~KernelActivity();
  KernelActivity(const KernelActivity&) = delete;
  KernelActivity& operator=(const KernelActivity&) = delete;

  // Records every kernel that runs from now until stop().
  void start();
  void stop();
  // The kernels recorded since the last take() that have finished (synchronize first: a
  // running kernel's record is not out yet), in no particular order.
  std::vector<KernelSpan> take();
};

}  // namespace fusec::rt
