// `fusec profile`'s "GEMM autotuning" section: per GEMM group, the algorithm the runtime chose
// (rt::LaunchInfo::gemmTuning, runtime/gemm_tuning_cache.h), how many candidates were timed,
// the heuristic's first choice against the chosen one (median ms per cuBLASLt call, measured
// when the choice was tuned: in this process, or in the one that filled the disk cache), the
// gain and the estimated time saved per step; then the time the same calls took inside the step
// (the profile's per-launch medians), against the tuned time: a GEMM timed alone, on operands
// its repeated calls keep in L2, can run faster than it does between the step's other kernels.
// Kept apart from bench/profile.cpp, which only calls it.
#pragma once
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/gemm_tuning_cache.h"

namespace fusec::bench {

// One GEMM launch of the program, as the profile collects them.
struct GemmTuningLaunch {
  std::string group;  // the profile's kernel group with its phase: "gemm 1024x768x768 (bwd)"
  int64_t calls = 1;  // cuBLASLt calls per launch (rt::LaunchInfo::gemmCalls)
  rt::GemmTuning tuning;
  double stepMs = NAN;  // the launch's median time in the step (all its calls); NaN: not measured
};

struct GemmTuningRow {
  std::string gemm;    // the group
  std::string source;  // tuned | cached | heuristic
  std::string algo;
  int64_t launches = 0;          // per step
  int64_t calls = 0;             // cuBLASLt calls per step
  int candidates = 0;
  double heuristicMs = 0, tunedMs = 0;  // per call; NaN when untimed
  double stepMs = 0;                    // the row's launches in the step, summed; NaN when unmeasured
  double gain() const { return heuristicMs / tunedMs; }  // NaN when untimed
  double savedMs() const { return (heuristicMs - tunedMs) * double(calls); }
  double stepMsPerCall() const { return stepMs / double(calls); }
  double stepOverTuned() const { return stepMsPerCall() / tunedMs; }  // 1: as fast as when tuned
};

// Launches of one group with one choice make one row; rows by time saved, most first.
std::vector<GemmTuningRow> gemmTuningRows(const std::vector<GemmTuningLaunch>& launches);

// The markdown section (heading, table, total line); empty for a program without GEMMs.
std::string gemmTuningTable(const std::vector<GemmTuningLaunch>& launches);
// The same rows as a JSON array (untimed figures are null).
nlohmann::ordered_json gemmTuningJson(const std::vector<GemmTuningLaunch>& launches);

}  // namespace fusec::bench
