// Summary statistics of per-iteration times, as the seed reports tabulate them (mean ± std,
// min, max, median, CV). The benchmark reports the median as its headline number: one slow
// iteration (a clock ramp, a page fault, another process) moves the mean but not the median.
#pragma once
#include <vector>

namespace fusec::bench {

struct Stats {
  int n = 0;
  double mean = 0, std = 0, min = 0, max = 0, median = 0;
  double cv = 0;  // std / mean (0 when mean is 0): the run-to-run noise, as a fraction
};

// Throws Error on an empty sample. `std` is the sample standard deviation (n - 1 in the
// denominator, as torch.std and numpy.std(ddof=1)), 0 for a single sample.
Stats summarize(const std::vector<double>& samples);

}  // namespace fusec::bench
