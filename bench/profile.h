// `fusec profile`'s breakdown: every launch of a planned graph put in a category and a kernel
// group, decided from the Graph alone (so the grouping is tested on the CPU), then the
// per-launch times the runtime measured (rt::Executable::timeLaunches, aligned with the same
// top-level op order) summed into the tables the seed reports built by hand from nsys.
//
// Categories:
//   attention    the naive attention core, recognised by data flow, not by names:
//                  * softmax kernels: row reductions whose body exponentiates without a log
//                    (kernelHint "softmax"; cross-entropy has the log);
//                  * kernels that read a softmax kernel's result: the softmax backward
//                    (dS = P * (dP - rowsum(dP * P))), or a cast of P under bf16;
//                  * GEMMs with an operand produced by, or a result read by, one of those
//                    kernels (through views): QK^T, PV, and backward dO V^T, P^T dO, dS K, dS^T Q;
//   gemm         every other GEMM (projections, FFN, lm_head and their gradients);
//   optimizer    AdamW kernels (multi_tensor family, or kernelHint "adamw"; "embedding_adamw",
//                the embedding's update with its gradient's scatter as prologue);
//   pointwise, row_reduce, col_reduce   the other fused kernels by family;
//   comm         collectives of a data-parallel step (all_reduce, reduce_scatter, all_gather: NCCL's
//                kernels on their own stream, beside the compute); not in the sum of launch
//                times, and their share is of that sum;
//   other        reduce_all (a reduction to a scalar of its own; a training step's loss mean is
//                cross-entropy's total instead) and scatter (an embedding gradient not fused into
//                its update, e.g. a table that is returned, or above 16,384 positions).
//
// Launches of step-invariant values (ir/step_invariant.h: RoPE's tables) run at the first
// call only: their group ends in " (once)", and they count no time and no bytes.
//
// Kernel groups: launches with the same kernel across layers, i.e. the kernel's name without
// its number ("row_reduce_7_softmax" -> "row_reduce_*_softmax"), GEMMs by shape
// ("gemm 1024x768x768"), each split by phase: forward launches (ancestors of an ordinary
// output, passes/launch_stats.h launchPlaces) apart from backward ones (the rest), since an
// RMSNorm forward and its backward share a hint but not a body.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/ceilings.h"
#include "bench/gemm_tuning_report.h"
#include "bench/report.h"
#include "bench/roofline.h"
#include "ir/graph.h"
#include "runtime/kernel_spans.h"

namespace fusec::bench {

enum class LaunchCategory { Gemm, Pointwise, RowReduce, ColReduce, Attention, Optimizer, Comm, Other };
const char* categoryName(LaunchCategory c);  // "gemm", "pointwise", "row_reduce", ...
constexpr int kNumCategories = 8;

struct LaunchClass {
  std::string name;   // the runtime's launch name: the kernel's name, or the GEMM's result value
  std::string group;  // kernel group, e.g. "row_reduce_*_rmsnorm", "gemm 64x72x24"
  LaunchCategory category = LaunchCategory::Other;
  bool gemm = false;
  bool backward = false;
  std::string family;  // the kernel family ("pointwise", "row_reduce", ...), "gemm" for a GEMM
  int layer = -1;      // its transformer block (passes/launch_stats.h launchPlaces), -1 outside
  LaunchTraffic traffic;  // bytes and FLOPs the launch must move and do (bench/roofline.h)
};

// One entry per launch (top-level kernel or matmul) of the planned graph `g`, in program
// order: the order of rt::Executable::launches(). Throws Error for a graph with no launches.
std::vector<LaunchClass> classifyLaunches(const Graph& g);

// "row_reduce_12_softmax" -> "row_reduce_*_softmax": the first all-digit '_' field becomes '*'.
std::string kernelGroupName(const std::string& kernelName);

// A host-side phase of getting a program ready (tracing, a pass, NVRTC and loading, the first
// run that tunes the GEMMs), for the trace's CPU track.
struct HostPhase {
  std::string name;
  double ms = 0;
};

// The measured profile of one program.
struct ProgramProfile {
  std::string program;               // forward | train_step
  std::vector<LaunchClass> launches;
  std::vector<double> ms;            // median milliseconds per launch, aligned with launches
  // How ms was measured: each launch's kernels on the device in the step's CUDA graph (CUPTI,
  // as Nsight Systems shows them: rt::Executable::timeKernels), or CUDA events around each
  // launch, launched one by one (rt::Executable::timeLaunches: about 2.4 us of launch gap
  // in every launch's time).
  bool kernelTimes = false;
  std::optional<double> graphMs;     // the whole step replayed as one CUDA graph (median)
  Ceilings ceilings;                 // measured in the same run (zero: no roofline percentages)
  std::vector<GemmTuningLaunch> gemmTuning;  // the GEMMs' algorithm choices (bench/gemm_tuning_report.h)
  std::vector<HostPhase> host;       // in order (empty: none measured)
  // A data-parallel step's replays: how much of its collectives' time no compute kernel hid
  // (runtime/kernel_spans.h stepOverlap, the replay with the median exposed time).
  std::optional<rt::StepOverlap> overlap;
  int ranks = 1;
  double totalMs() const;            // sum of ms, collectives (comm) left out: they run beside
  double gemmMs() const;             // GEMMs of both the gemm and attention categories
};

// How `programs` were timed, for the header: "kernel durations (CUPTI) in the step's CUDA
// graph", "CUDA events around each launch", or both when they differ.
std::string timingDescription(const std::vector<ProgramProfile>& programs);

// Per-launch medians over `runs` (each aligned with the launches). Throws Error on ragged runs.
std::vector<double> medianPerLaunch(const std::vector<std::vector<float>>& runs);

struct ProfileRow {
  std::string key;     // category, or group (with " (bwd)" for backward launches)
  std::string category;
  int64_t count = 0;
  double ms = 0, share = 0;  // share of the program's summed launch time, a fraction
  int64_t bytes = 0, flops = 0;  // summed LaunchTraffic of the row's launches
  double gemmFloorMs = 0;        // the row's FLOPs at the GEMM ceiling of each launch's dtype
  double floorMs = 0;            // summed per-launch floors (bench/roofline.h floorMs)
};

// A row's achieved rates: GB/s and its % of the copy ceiling, TFLOP/s and its % of the GEMM
// ceiling (the FLOPs' time at the ceiling over the row's time), and its floor's % of the
// row's time (100%: at the roofline). Percentages are 0 without ceilings.
struct RooflineFigures {
  double gbps = 0, copyPct = 0, tflops = 0, gemmPct = 0, floorPct = 0;
};
RooflineFigures rooflineFigures(const ProfileRow& r, const Ceilings& c);

std::vector<ProfileRow> byCategory(const ProgramProfile& p);  // every category, in enum order
std::vector<ProfileRow> byKernel(const ProgramProfile& p);    // by total time, descending
// The `n` non-GEMM groups (attention GEMMs excluded too) with the most time.
std::vector<ProfileRow> topNonGemm(const ProgramProfile& p, size_t n = 10);

// The profile report: the header line (model, dtype, sizes, device) then, per program, the
// category and kernel tables, the top-10 non-GEMM kernels, graph vs summed launch time, and
// (with two programs) the GEMM share of forward against the full step. Every row carries its
// roofline: bytes moved, GB/s and % of the copy ceiling, TFLOP/s and % of the GEMM ceiling,
// and % of its floor (the time its bytes and FLOPs need at the ceilings), against the
// program's `ceilings` (all zero: the percentages are left out). Table: markdown tables as
// the seeds wrote them; JSON: one object. Csv is refused (Error).
std::string formatProfile(const std::string& header, const std::vector<ProgramProfile>& programs, Format format);

}  // namespace fusec::bench
