// Which side-stream kernel each later launch on the compute stream must wait for
// (ir/side_stream.h; runtime/executable.cpp launches them). A side kernel starts after the
// compute work listed before it and runs beside what follows, so a later compute launch
// waits for it only where their memory overlaps: the launch writes what the kernel reads or
// writes (a buffer the memory plan reuses), or reads what it writes. The side stream runs in
// order, so waiting for the last such kernel covers every one before it, and none of those
// is waited for again. Host-only, so it is tested without a GPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fusec::rt {

// [lo, hi) bytes of device memory.
struct Span {
  uintptr_t lo = 0, hi = 0;
};

// One launch of the list, in order: whether it runs on the side stream, and the storage its
// operands (reads) and results (writes) span.
struct LaunchAccess {
  bool side = false;
  std::vector<Span> reads, writes;
};

// For each launch, the index of the side launch it waits for, or -1 (always -1 for side
// launches themselves).
std::vector<long> sideStreamWaits(const std::vector<LaunchAccess>& launches);

}  // namespace fusec::rt
