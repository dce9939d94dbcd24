#include "bench/stats.h"

#include <algorithm>
#include <cmath>

#include "ir/graph.h"

namespace fusec::bench {

Stats summarize(const std::vector<double>& samples) {
  if (samples.empty()) throw Error("statistics of an empty sample");
  Stats s;
  s.n = int(samples.size());
  std::vector<double> v = samples;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  const size_t mid = v.size() / 2;
  s.median = v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / double(v.size());
  if (v.size() > 1) {
    double sq = 0;
    for (double x : v) sq += (x - s.mean) * (x - s.mean);
    s.std = std::sqrt(sq / double(v.size() - 1));
  }
  s.cv = s.mean != 0 ? s.std / s.mean : 0;
  return s;
}

}  // namespace fusec::bench
