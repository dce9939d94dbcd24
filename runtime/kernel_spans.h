// Kernel times from a profiler's records (CUPTI's activity records, runtime/kernel_activity.h),
// given to the launches of a launch list that ran them one after the other: the durations
// Nsight Systems shows, without the gaps between kernels that CUDA events around each launch
// count (about 2.4 us a launch on an H200, in a graph as out of one: bench/RESULTS.md).
// Plain C++: the CPU tests prove it.
#pragma once
#include <cstdint>
#include <vector>

namespace fusec::rt {

// One kernel as the device ran it, in nanoseconds of the device's clock.
struct KernelSpan {
  uint64_t start = 0, end = 0;
};

// The spans of one run of a launch list whose launch i ran kernels[i] kernels (cuBLASLt may run
// two for one GEMM: split-K's reduction), in list order, as a CUDA graph's chain of nodes runs
// them. Launch i's time, in ms, is from its first kernel's start to its last kernel's end (0
// for a launch of no kernel). `spans` may come in any order: they are ordered by start, which
// is the chain's order even where a kernel starts before its predecessor ends (programmatic
// dependent launch). Throws Error (one line) when the spans are not those launches': another
// count, or a span that ends before it starts.
std::vector<float> launchTimesFromSpans(std::vector<KernelSpan> spans, const std::vector<int>& kernels);

}  // namespace fusec::rt
