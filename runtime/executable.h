// An Executable is one planned function (a graph after `fuse` and `memory-plan`) resident on
// the GPU and ready to run as a flat launch list:
//
//   * two allocations, sized by the memory plan: the RESIDENT region (inputs, params: weights,
//     AdamW moments, bf16 weight copies; at each source's `@N`) and the ARENA (every computed
//     value at its `@N`). Views, resident concats and in-place updates own no storage: their
//     addresses come from ir/strided_view.h and Graph::outputUpdates, resolved once here;
//   * a launch list in program order: generated kernels (NVRTC cubins, handles resolved at
//     construction) and cuBLASLt GEMMs (runtime/gemm_plan.h), every device address fixed;
//   * run(): the first call (warm-up: cuBLASLt picks its algorithms, autotuned unless
//     turned off, see ExecutableOptions::gemmAutotune) launches the list directly; the second captures it once as a CUDA graph and every later call replays that
//     graph, so a step is one graph launch (ExecutableOptions::cudaGraph = false launches the
//     list every time, checking each launch).
//
// Sources are bound by their `name` attribute with bind(); a bound value stays on the device
// and in-place updates (`return %w.new -> "w"`) overwrite it, so a training loop binds the
// weights once and then only `step` (and new tokens). Host tensors are converted to the
// value's dtype (f32 values rounded to bf16 for bf16 params) and checked against its type.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codegen/cubin_cache.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "passes/fusion/kernel_family.h"
#include "runtime/gemm_tuning_cache.h"
#include "runtime/kernel_spans.h"

namespace fusec::rt {

class KernelActivity;
class Communicator;

struct ExecutableOptions {
  bool cudaGraph = true;                       // capture after warm-up and replay
  bool tf32 = false;                           // f32 GEMMs on TF32 tensor cores
  const codegen::CubinCache* cache = nullptr;  // NVRTC cubin cache (null: compile every time)
  // Debugging: with cudaGraph off, synchronize after every launch so that a fault inside a
  // kernel is reported with the launch that caused it (`FUSEC_SYNC_LAUNCHES=1` in the CLI).
  bool syncEachLaunch = false;
  // GEMMs: time cuBLASLt's candidate algorithms at the first run (never under capture) and
  // keep the fastest, cached on disk beside the cubin cache (`cache`'s directory; in memory
  // only without one), so later processes load the choice instead of timing again.
  // FUSEC_GEMM_AUTOTUNE=0 in the environment turns it off as well (A/B measurements).
  bool gemmAutotune = true;
  // The job a program with collectives runs in (runtime/collectives.h); it must outlive the
  // Executable. Collectives run on their own stream: each waits for the compute that made its
  // operands (an event), and the first launch that reads its results waits for it, so the
  // order passes/schedule.cpp chose is what overlaps them; a call ends with both streams
  // joined (also inside the CUDA graph).
  Communicator* communicator = nullptr;
  // The C interface (api/c_api.h): sources and outputs are mostly the caller's buffers, read
  // and written where they lie. So the sources' resident slots are allocated only once one is
  // needed (a source copied in, bound from the host, or read back), and so is the top of the
  // arena where memory-plan-outputs-last put the outputs' storage (once an output is not
  // placed): a backward's saved activations, a forward's outputs, are not held twice.
  bool callerBuffers = false;
  // Kernels recorded side_stream (ir/side_stream.h: AdamW's updates) run on a second,
  // lower-priority stream beside the compute, each after the work scheduled before it; a
  // later launch waits for one only where their memory overlaps (a buffer the plan reuses).
  // For now only with FUSEC_SIDE_STREAM=1 in the environment (runtime/executable.cpp
  // sideStreamAllowedByEnv says why); =0 or unset runs everything on one stream.
  // Not with callerBuffers: a caller may move a buffer between calls, and the overlaps are
  // computed once, from the addresses the launch list holds.
  bool sideStream = true;
};

// One entry of the launch list, as `fusec profile` and the tests see it.
struct LaunchInfo {
  enum class Kind { Gemm, Kernel, Collective };
  Kind kind = Kind::Kernel;
  std::string name;                            // kernel name, the GEMM's result value ("%logits", "%12"), or the
                                               // collective and its bytes ("all_reduce 12 tensors, 28.3 MB")
  KernelFamily family = KernelFamily::Pointwise;  // kernels only
  int64_t flops = 0;                           // GEMMs: 2*M*N*K*batch; kernels: 0
  int64_t gemmCalls = 0;                       // GEMMs: cuBLASLt calls per launch (the plan's launches)
  // GEMMs, after the first run (or timeLaunches): the algorithm chosen and how.
  std::optional<GemmTuning> gemmTuning;
  // Computes a step-invariant value (ir/step_invariant.h): it runs at the first call only,
  // and is neither in the CUDA graph nor timed after that (0 ms).
  bool once = false;
  int64_t bytes = 0;  // collectives: the bytes each rank contributes (its operands)
};

class Executable {
 public:
  // Compiles (NVRTC, through opts.cache) and loads the kernels of `g`'s function, allocates
  // the resident region and the arena, and builds the launch list. `module` must outlive the
  // Executable. Throws Error: "no CUDA device", "out of GPU memory: needs X GiB, Y GiB free"
  // (checked for resident + arena + workspace before anything is allocated), or a graph the
  // runtime cannot run (not planned, a top-level op that is neither view, GEMM nor kernel).
  Executable(const Graph& g, ExecutableOptions opts = {});
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  // Uploads every tensor of `values` whose name is an input or param of the function (others
  // are ignored; returns how many were bound). Throws Error on a type mismatch.
  size_t bind(const Bindings& values);
  // One source. Throws Error when `name` is not an input or param, or on a type mismatch.
  void bind(const std::string& name, const HostTensor& value);

  // Zero-copy calls for a framework that owns the tensors (api/c_api.h: PyTorch's CUDA
  // tensors). bindAddress: the next calls read source `name` at `device` (the caller's
  // memory, which must stay valid and unchanged while calls that read it run) instead of its
  // resident slot; false (nothing changed) where that cannot be: an address not 256-byte
  // aligned, a param an in-place update writes or a resident concat reads. copyInput then
  // copies it into its slot, on the step's stream. placeOutput: the next calls write output
  // i at `device` (false where runtime/output_placement.h says it is copied, or for an
  // unaligned address: copyOutput copies it there after a call). A changed address
  // re-resolves the launch list at the next run and updates the captured graph.
  bool bindAddress(const std::string& name, void* device);
  void copyInput(const std::string& name, const void* device);
  bool placeOutput(size_t i, void* device);
  void unplaceOutput(size_t i);  // output i back in its own slot (copyOutput then)
  void copyOutput(size_t i, void* device);
  // Orders the step's stream after the work enqueued so far on `callerStream` (a
  // cudaStream_t), and `callerStream` after the calls enqueued so far (signal).
  void waitFor(void* callerStream);
  void signal(void* callerStream);

  // Enqueues one call on the executable's stream. Throws Error naming any source never
  // bound, or the launch that failed.
  void run();
  // Waits for the enqueued calls; a CUDA error raised by a kernel is reported here.
  void synchronize();

  // Output i of the last call (synchronizes first), in its dtype's values.
  HostTensor output(size_t i);
  // The current value of a source (a param after in-place updates), by name. A param that
  // holds one rank's rows comes back whole, gathered from the ranks: every rank reads it.
  HostTensor read(const std::string& name);

  const std::vector<LaunchInfo>& launches() const;
  // Runs the launch list once without a graph, timing each launch with CUDA events; returns
  // milliseconds per launch, aligned with launches().
  std::vector<float> timeLaunches();
  // Times each launch as it runs in the step's CUDA graph, from its kernels' start and end on
  // the device (CUPTI, which `activity` records: runtime/kernel_activity.h), as Nsight Systems
  // does: one replay of the graph. The first call also counts each launch's kernels, running
  // each launch as a graph of its own (together a call of the program, as run() is).
  // Milliseconds per launch, aligned with launches(). Throws Error before the graph exists
  // (run() twice first), or when the records are not the launches' (runtime/kernel_spans.h).
  // `overlap`, when given, receives the replay's compute and collective time and how much of
  // the collectives no compute kernel hid (runtime/kernel_spans.h stepOverlap).
  std::vector<float> timeKernels(KernelActivity& activity, StepOverlap* overlap = nullptr);

  // How often caller addresses moved (bindAddress, placeOutput): relinks of the launch list,
  // and of those, how many updated the captured graph in place and how many dropped it (the
  // next call captured and instantiated it again).
  struct RelinkCounts {
    int64_t relinks = 0, graphUpdates = 0, graphRebuilds = 0;
  };
  RelinkCounts relinkCounts() const;

  size_t arenaBytes() const;
  size_t residentBytes() const;
  // Device memory held now: the arena and, once allocated (callerBuffers), the resident region
  // and the arena's top.
  size_t allocatedBytes() const;
  bool graphCaptured() const;
  void* stream() const;  // the cudaStream_t every launch goes to

 private:
  HostTensor readWhole(const Value& param, int64_t ranks);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fusec::rt
