#include "runtime/kernel_spans.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "ir/error.h"

namespace fusec::rt {

std::vector<float> launchTimesFromSpans(std::vector<KernelSpan> spans, const std::vector<int>& kernels) {
  const int64_t expected = std::accumulate(kernels.begin(), kernels.end(), int64_t(0));
  if (int64_t(spans.size()) != expected)
    throw Error("the profiler recorded " + std::to_string(spans.size()) + " kernels for a run of " +
                std::to_string(kernels.size()) + " launches that run " + std::to_string(expected));
  for (const KernelSpan& s : spans)
    if (s.end < s.start) throw Error("the profiler recorded a kernel that ends before it starts");
  std::stable_sort(spans.begin(), spans.end(), [](const KernelSpan& a, const KernelSpan& b) { return a.start < b.start; });
  std::vector<float> ms(kernels.size(), 0.0f);
  size_t next = 0;
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (kernels[i] < 0) throw Error("internal: launch " + std::to_string(i) + " runs a negative number of kernels");
    if (kernels[i] == 0) continue;
    const uint64_t first = spans[next].start;
    uint64_t last = 0;
    for (int k = 0; k < kernels[i]; ++k) last = std::max(last, spans[next++].end);
    ms[i] = float(double(last - first) * 1e-6);
  }
  return ms;
}

}  // namespace fusec::rt
