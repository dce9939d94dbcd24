#include "runtime/kernel_spans.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "ir/error.h"

namespace fusec::rt {

namespace {

using Interval = std::pair<uint64_t, uint64_t>;

// The union of the spans that `pick` selects, as sorted disjoint intervals.
template <class Pick>
std::vector<Interval> unionOf(const std::vector<KernelSpan>& spans, Pick pick) {
  std::vector<Interval> in;
  for (const KernelSpan& s : spans)
    if (pick(s)) in.push_back({s.start, s.end});
  std::sort(in.begin(), in.end());
  std::vector<Interval> out;
  for (const Interval& i : in) {
    if (!out.empty() && i.first <= out.back().second) out.back().second = std::max(out.back().second, i.second);
    else out.push_back(i);
  }
  return out;
}

uint64_t lengthOf(const std::vector<Interval>& u) {
  uint64_t n = 0;
  for (const Interval& i : u) n += i.second - i.first;
  return n;
}

// The length of the intersection of two sorted disjoint interval lists.
uint64_t overlapOf(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  uint64_t n = 0;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    const uint64_t lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) n += hi - lo;
    (a[i].second < b[j].second ? i : j)++;
  }
  return n;
}

}  // namespace

bool isCommKernelName(const std::string& name) {
  // Mangled or not: "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL...", older NCCLs' "ncclKernel_...".
  return name.find("ncclDevKernel") != std::string::npos || name.find("ncclKernel") != std::string::npos;
}

StepOverlap stepOverlap(const std::vector<KernelSpan>& spans) {
  StepOverlap o;
  if (spans.empty()) return o;
  uint64_t first = spans[0].start, last = spans[0].end;
  for (const KernelSpan& s : spans) {
    if (s.end < s.start) throw Error("the profiler recorded a kernel that ends before it starts");
    first = std::min(first, s.start);
    last = std::max(last, s.end);
  }
  const auto compute = unionOf(spans, [](const KernelSpan& s) { return !s.comm; });
  const auto comm = unionOf(spans, [](const KernelSpan& s) { return s.comm; });
  o.stepMs = double(last - first) * 1e-6;
  o.computeMs = double(lengthOf(compute)) * 1e-6;
  o.commMs = double(lengthOf(comm)) * 1e-6;
  o.exposedCommMs = double(lengthOf(comm) - overlapOf(comm, compute)) * 1e-6;
  return o;
}

std::vector<float> launchTimesFromSpans(std::vector<KernelSpan> spans, const std::vector<int>& kernels,
                                        const std::vector<bool>& onComm) {
  if (!onComm.empty()) {
    if (onComm.size() != kernels.size()) throw Error("internal: onComm does not cover the launches");
    // Each stream's spans to its own launches, then the two merged back in launch order.
    std::vector<KernelSpan> streams[2];
    for (KernelSpan& s : spans) streams[s.comm].push_back(std::move(s));
    std::vector<int> counts[2];
    for (size_t i = 0; i < kernels.size(); ++i) {
      counts[onComm[i]].push_back(kernels[i]);
      counts[!onComm[i]].push_back(0);
    }
    const std::vector<float> compute = launchTimesFromSpans(std::move(streams[0]), counts[0]);
    const std::vector<float> comm = launchTimesFromSpans(std::move(streams[1]), counts[1]);
    std::vector<float> ms(kernels.size());
    for (size_t i = 0; i < kernels.size(); ++i) ms[i] = onComm[i] ? comm[i] : compute[i];
    return ms;
  }
  const int64_t expected = std::accumulate(kernels.begin(), kernels.end(), int64_t(0));
  if (int64_t(spans.size()) != expected)
    throw Error("the profiler recorded " + std::to_string(spans.size()) + " kernels for a run of " +
                std::to_string(kernels.size()) + " launches that run " + std::to_string(expected));
  for (const KernelSpan& s : spans)
    if (s.end < s.start) throw Error("the profiler recorded a kernel that ends before it starts");
  std::stable_sort(spans.begin(), spans.end(), [](const KernelSpan& a, const KernelSpan& b) { return a.start < b.start; });
  std::vector<float> ms(kernels.size(), 0.0f);
  size_t next = 0;
  uint64_t chainEnd = 0;  // where the launches before this one ended
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (kernels[i] < 0) throw Error("internal: launch " + std::to_string(i) + " runs a negative number of kernels");
    if (kernels[i] == 0) continue;
    // A dependent launch's blocks start while its predecessor's last wave runs and wait for
    // it to finish: that wait is the predecessor's time, so a launch counts from where the
    // chain before it ended (a no-op for launches that never overlap).
    const uint64_t first = std::max(spans[next].start, std::min(chainEnd, spans[next].end));
    uint64_t last = 0;
    for (int k = 0; k < kernels[i]; ++k) last = std::max(last, spans[next++].end);
    ms[i] = float(double(last - first) * 1e-6);
    chainEnd = std::max(chainEnd, last);
  }
  return ms;
}

}  // namespace fusec::rt
