#include "runtime/side_stream_waits.h"

namespace fusec::rt {

namespace {

bool overlap(const std::vector<Span>& a, const std::vector<Span>& b) {
  for (const Span& x : a)
    for (const Span& y : b)
      if (x.lo < y.hi && y.lo < x.hi) return true;
  return false;
}

}  // namespace

std::vector<long> sideStreamWaits(const std::vector<LaunchAccess>& launches) {
  std::vector<long> waits(launches.size(), -1);
  std::vector<size_t> pending;  // side launches no compute launch has waited for yet
  for (size_t i = 0; i < launches.size(); ++i) {
    const LaunchAccess& e = launches[i];
    if (e.side) {
      pending.push_back(i);
      continue;
    }
    size_t last = pending.size();
    for (size_t k = 0; k < pending.size(); ++k) {
      const LaunchAccess& s = launches[pending[k]];
      if (overlap(e.writes, s.reads) || overlap(e.writes, s.writes) || overlap(e.reads, s.writes)) last = k;
    }
    if (last == pending.size()) continue;
    waits[i] = long(pending[last]);
    pending.erase(pending.begin(), pending.begin() + long(last) + 1);
  }
  return waits;
}

}  // namespace fusec::rt
