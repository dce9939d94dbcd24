#include "tools/fusec/cpu_estimate.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "ir/cpu_blas.h"
#include "ir/error.h"
#include "ir/interpreter.h"

namespace fusec::cli {

namespace {

// Rates of the interpreter, fitted to steps of small measured on a 2-core machine (batch 1 ctx
// 32, batch 8 ctx 256, with and without OpenBLAS: bench/RESULTS.md, issue 44): its GEMMs in
// double through OpenBLAS and through its own loop, per core, and how fast it makes and frees
// the values of its other ops, per byte (one core: those ops are not threaded). The peak adds
// what the values alone miss: the process, the allocator, an op's scratch copies.
constexpr double kBlasFlopsPerCore = 40e9, kLoopFlopsPerCore = 6.5e9, kValueBytesPerSecond = 0.48e9;
constexpr double kPeakOverheadGB = 1.0;

double memAvailableGB() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  long long kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return double(kb) / (1 << 20);
  return 0;
}

}  // namespace

CpuEstimate estimateCpuStep(const Graph& g, unsigned threads, bool blas) {
  const InterpreterCost c = interpreterCost(g);
  int64_t state = 0;  // the runner's own copy of the inputs, weights and moments
  for (const auto& op : g.ops)
    if (op->kind == OpKind::Input || op->kind == OpKind::Param)
      state += int64_t(op->result()->type.numel()) * (isFloat(op->result()->type.dtype) ? 4 : 8);
  CpuEstimate e;
  e.peakGB = double(c.peakBytes + state) / (1 << 30) + kPeakOverheadGB;
  const double flops = double(std::max(1u, threads)) * (blas ? kBlasFlopsPerCore : kLoopFlopsPerCore);
  e.stepSeconds = double(c.gemmFlops) / flops + double(c.valueBytes) / kValueBytesPerSecond;
  e.availableGB = memAvailableGB();
  return e;
}

std::string describeCpuStep(const Graph& g) {
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  const std::string& blas = cpuBlasName();
  const CpuEstimate e = estimateCpuStep(g, threads, !blas.empty());
  char peak[32], avail[32];
  std::snprintf(peak, sizeof peak, "%.1f GB", e.peakGB);
  std::snprintf(avail, sizeof avail, "%.1f GB", e.availableGB);
  if (e.availableGB > 0 && e.peakGB > e.availableGB)
    throw Error(std::string("run: the CPU interpreter needs about ") + peak + " for a step of this program, and this machine has " +
                avail + " available: lower --batch or --ctx, or run it on a GPU");
  if (e.stepSeconds < 2) return "";
  std::ostringstream s;
  s << "run: CPU interpreter: about " << (e.stepSeconds < 10 ? std::to_string(int(e.stepSeconds + 0.5)) : std::to_string(int(e.stepSeconds / 5 + 0.5) * 5))
    << " s and " << peak << " a step (" << threads << (threads == 1 ? " core, " : " cores, ")
    << (blas.empty() ? "no BLAS: Debian's libopenblas0-pthread makes its GEMMs several times faster" : blas) << ")";
  return s.str();
}

}  // namespace fusec::cli
