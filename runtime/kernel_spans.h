// Kernel times from a profiler's records (CUPTI's activity records, runtime/kernel_activity.h),
// given to the launches of a launch list that ran them one after the other: the durations
// Nsight Systems shows, without the gaps between kernels that CUDA events around each launch
// count (about 2.4 us a launch on an H200, in a graph as out of one: bench/RESULTS.md).
// Plain C++: the CPU tests prove it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fusec::rt {

// One kernel as the device ran it, in nanoseconds of the device's clock.
struct KernelSpan {
  uint64_t start = 0, end = 0;
  bool comm = false;     // a collective's kernel (NCCL's), which runs beside the compute
  uint32_t stream = 0;   // the stream it ran on (CUPTI's id), for a trace's tracks
  std::string name;      // the kernel's (possibly mangled) name
};

// Whether a kernel of this name (mangled or not) is a collective's: NCCL's kernels.
bool isCommKernelName(const std::string& name);

// The spans of one run of a launch list whose launch i ran kernels[i] kernels (cuBLASLt may run
// two for one GEMM: split-K's reduction), in list order, as a CUDA graph's chain of nodes runs
// them. Launch i's time, in ms, is from its first kernel's start, or from the end of the
// launches before it where it started earlier (a programmatic dependent launch waiting for its
// predecessor), to its last kernel's end (0 for a launch of no kernel): so the launches' times
// add up to the chain's. `spans` may come in any order: they are ordered by start, which is
// the chain's order even where a kernel starts before its predecessor ends. Throws Error (one
// line) when the spans are not those launches': another count, or a span that ends before it
// starts.
// Launches with `onComm[i]` (when given) ran on the collectives' stream: the comm spans are
// theirs, in start order, and the others' the rest, so the two streams' overlap does not mix
// them up.
std::vector<float> launchTimesFromSpans(std::vector<KernelSpan> spans, const std::vector<int>& kernels,
                                        const std::vector<bool>& onComm = {});

// How one step's collectives overlapped its compute, from the spans of one run (ms):
//   step       first start to last end;
//   compute    the time at least one compute kernel ran (the union of their spans);
//   comm       the time at least one collective kernel ran;
//   exposed    the time a collective kernel ran and no compute kernel did: what the step
//              waits for the network (what PyTorch's profiler calls exposed communication).
struct StepOverlap {
  double stepMs = 0, computeMs = 0, commMs = 0, exposedCommMs = 0;
};
StepOverlap stepOverlap(const std::vector<KernelSpan>& spans);

}  // namespace fusec::rt
