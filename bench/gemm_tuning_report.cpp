#include "bench/gemm_tuning_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "bench/markdown.h"

namespace fusec::bench {
namespace {

std::string num(const char* f, double x) { return std::isnan(x) ? "-" : formatNumber(f, x); }

nlohmann::ordered_json numJson(double x) { return std::isnan(x) ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(x); }

}  // namespace

std::vector<GemmTuningRow> gemmTuningRows(const std::vector<GemmTuningLaunch>& launches) {
  std::map<std::tuple<std::string, std::string, std::string>, size_t> index;
  std::vector<GemmTuningRow> rows;
  for (const auto& l : launches) {
    const rt::GemmTuning& t = l.tuning;
    auto [it, fresh] = index.try_emplace({l.group, t.algoDesc, rt::sourceName(t.source)}, rows.size());
    if (fresh) {
      GemmTuningRow r;
      r.gemm = l.group;
      r.source = rt::sourceName(t.source);
      r.algo = t.algoDesc;
      r.candidates = t.candidates;
      r.heuristicMs = t.heuristicMs;
      r.tunedMs = t.tunedMs;
      rows.push_back(r);
    }
    GemmTuningRow& r = rows[it->second];
    r.launches++;
    r.calls += l.calls;
    r.stepMs += l.stepMs;  // NaN once any launch is unmeasured
  }
  auto saved = [](const GemmTuningRow& r) { return std::isnan(r.savedMs()) ? -1e300 : r.savedMs(); };
  std::stable_sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) { return saved(a) > saved(b); });
  return rows;
}

std::string gemmTuningTable(const std::vector<GemmTuningLaunch>& launches) {
  const std::vector<GemmTuningRow> rows = gemmTuningRows(launches);
  if (rows.empty()) return "";
  std::vector<std::vector<std::string>> cells;
  double saved = 0, inStep = 0, atTuned = 0;
  int timed = 0;
  for (const auto& r : rows) {
    cells.push_back({r.gemm, std::to_string(r.launches), r.source, std::to_string(r.candidates),
                     num("%.4f", r.heuristicMs), num("%.4f", r.tunedMs), num("%.2fx", r.gain()),
                     num("%.3f", r.savedMs()), num("%.4f", r.stepMsPerCall()), num("%.2fx", r.stepOverTuned()), r.algo});
    if (!std::isnan(r.savedMs())) saved += r.savedMs(), ++timed;
    if (!std::isnan(r.stepOverTuned())) inStep += r.stepMs, atTuned += r.tunedMs * double(r.calls);
  }
  std::string s = "\n### GEMM autotuning (median ms per cuBLASLt call, measured when tuned, and in the step)\n\n";
  s += markdownTable({"GEMM", "Launches", "Choice", "Candidates", "Heuristic (ms)", "Chosen (ms)", "Gain", "Saved/step (ms)",
                      "In step (ms)", "Step/chosen", "Algorithm"},
                     cells);
  if (timed == 0)
    s += "\nNo GEMM was timed: autotuning is off (FUSEC_GEMM_AUTOTUNE=0) or every choice was made under capture.\n";
  else
    s += "\nEstimated time saved per step by autotuning: " + num("%.3f ms", saved) + " (" + std::to_string(timed) + " of " +
         std::to_string(rows.size()) + " GEMM groups timed)\n";
  if (atTuned > 0)
    s += "In the step these GEMMs took " + num("%.3f ms", inStep) + ", against " + num("%.3f ms", atTuned) +
         " at the times they were tuned at (" + num("%.2fx", inStep / atTuned) +
         "): the tuner times a GEMM alone, its operands in L2 after the first call\n";
  return s;
}

nlohmann::ordered_json gemmTuningJson(const std::vector<GemmTuningLaunch>& launches) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const auto& r : gemmTuningRows(launches))
    a.push_back({{"gemm", r.gemm},
                 {"launches", r.launches},
                 {"calls", r.calls},
                 {"source", r.source},
                 {"candidates", r.candidates},
                 {"heuristic_ms", numJson(r.heuristicMs)},
                 {"chosen_ms", numJson(r.tunedMs)},
                 {"gain", numJson(r.gain())},
                 {"saved_ms_per_step", numJson(r.savedMs())},
                 {"step_ms_per_call", numJson(r.stepMsPerCall())},
                 {"step_over_chosen", numJson(r.stepOverTuned())},
                 {"algo", r.algo}});
  return a;
}

}  // namespace fusec::bench
