// What codegen may assume about the GPU its kernels run on: the one place that knows device
// facts. The runtime fills it from the device it opened (runtime/device.cpp targetOf, from
// cudaDeviceProp), so grids that should fill the GPU (grid-stride element loops, persistent
// row kernels, the column-sum kernels' fixed grid) are sized by its multiprocessors and
// thread slots, shared-memory budgets by its shared memory, and NVRTC compiles for its
// architecture. Sources emitted without a device (`fusec compile --emit`, `fusec codegen`)
// use the default, an H100 or H200. Whatever a kernel reads from here is baked into its source
// or its launch, so the cubin cache (keyed by source and architecture) never hands one
// device's kernels to another.
#pragma once
#include <cstdint>
#include <string>

namespace fusec::codegen {

struct Target {
  int major = 9, minor = 0;             // compute capability (kernels are built for sm_<major><minor>)
  int sms = 132;                        // streaming multiprocessors
  int threadsPerSm = 2048;              // resident threads a multiprocessor holds
  int regsPerSm = 65536;                // 32-bit registers a multiprocessor holds
  int64_t smemPerSm = 228 * 1024;       // shared memory a multiprocessor holds
  int64_t smemPerBlock = 227 * 1024;    // the most one block may opt into
  int64_t smemStaticPerBlock = 48 * 1024;  // what a block may declare statically (`__shared__` arrays), no opt-in
  int64_t smemReservedPerBlock = 1024;  // what the driver keeps of each resident block's share
  // Hopper's warpgroup MMA (wgmma), which only the architecture-specific target sm_90a has:
  // the bf16 attention forward uses it (codegen/attention_wgmma.cuh). The runtime clears it on
  // any other device, and with FUSEC_WGMMA=0 to measure the mma.sync kernels on a Hopper.
  bool wgmma = true;
  // With wgmma, the bf16 attention forward with a producer warpgroup (attention_wgmma.cuh
  // fa_forward_wgmma_ws), 1.2-1.3x the forward without it at d 64 and 128, N 4k-16k on an
  // H200 (bench/RESULTS.md); FUSEC_WGMMA_PRODUCER=0 measures the one without.
  bool wgmmaProducer = true;
  // The same for the bf16 backward's dK/dV pass on wgmma (fa_backward_dkdv_wgmma_ws),
  // FUSEC_WGMMA_PRODUCER_BWD=1. Off: measured on an H200 it is slower at d 64 (dK/dV 0.78 ->
  // 0.88 ms, [16, 8192, 64]) and within 4% either way at d 128 (bench/RESULTS.md); what limits
  // this pass is not its copies.
  bool wgmmaProducerBackward = false;
  // The bf16 causal backward on wgmma in one pass instead of two (attention_wgmma.cuh,
  // FA_WG_FUSED_DQ): the dK/dV blocks also multiply dS by their K tile and add the product to
  // each query tile's f32 dQ sum in a fixed order, key blocks from the last down, so the dQ
  // pass no longer recomputes S and dP (five products a tile pair instead of seven); a light
  // launch before it leaves the row statistics. 1: each consumer warpgroup adds its half of
  // dQ itself; 2: a writer warpgroup of its own does the adds. FUSEC_WGMMA_FUSED_DQ=0 / 1 / 2.
  int wgmmaFusedDq = 0;
  // The shortest sequence whose bf16 backward runs on wgmma (shorter ones run on mma.sync,
  // whose 64-row blocks, four an SM, overlap one another's prologues and stores where a 128-row
  // wgmma block walks two to four tiles alone). FUSEC_WGMMA_BWD_MIN_SEQ=N measures another.
  int64_t wgmmaBackwardMinSeq = 1024;
  // The same for the forward: keys shorter than this run on mma.sync. At 256 keys the wgmma
  // forward's 128-row blocks (168 registers a thread with the producer, 191 without) sit one
  // to an SM, each waiting for its own Q and first K tile, where the mma forward's 64-row
  // blocks of 128 threads sit four to an SM. Measured on an H100 at 512 (bench/RESULTS.md):
  // small b64's forward 0.82 -> 0.75 ms a step and its step -0.5% once, +0.1% the next
  // session, medium b4's step +1.1%, so wgmma keeps every length. FUSEC_WGMMA_FWD_MIN_SEQ=N.
  int64_t wgmmaForwardMinSeq = 0;
  // Up to this many rows (at most 256) the bf16 causal self-attention forward at d <= 64 is one
  // launch of a block a head with q, k and v whole in shared memory, two blocks an SM, each
  // warp two query strips whose causal work adds up evenly (attention_mma.cuh
  // fa_forward_short), instead of query tiles that each copy their key tiles again: on an H200
  // small b64's forward kernels 0.802 -> 0.726 ms a step (bench/RESULTS.md).
  // FUSEC_SHORT_FWD_MAX_SEQ=0 keeps the tiled forward.
  int64_t shortForwardMaxSeq = 256;
  // ... where there are at least this many heads (batch x heads) an SM, so that its block a
  // head fills every SM twice (medium b4, 64 heads: the step 9.76 -> 9.98 ms with it).
  // FUSEC_SHORT_FWD_MIN_HEADS_PER_SM=0 takes it at any count (the tests' few heads).
  int shortForwardMinHeadsPerSm = 2;
  // The longest sequence whose bf16 backward (d <= 64, one key/value head a query head) runs
  // as one launch, a block per head with q, dO, k and v whole in shared memory
  // (attention_mma.cuh fa_backward_short), instead of the dQ and dK/dV passes; the template
  // takes up to 256 rows (16 warps). FUSEC_SHORT_BWD_MAX_SEQ=0 runs the two passes.
  int64_t shortBackwardMaxSeq = 256;
  // The one-launch backward of causal self-attention (d = dv) keeps each tile's dS^T in shared
  // memory (attention_mma.cuh FA_SHORT_DS): dQ becomes dS K alone instead of S and dP computed
  // again, and pairs of warps share a long and a short strip so the causal work is even. Its
  // 16-row strips of the lower triangle take 76 KB beside q, dO, k and v at 256 rows (227 KB in
  // all). Results are deterministic but not the two passes' bits (the sums split elsewhere).
  // On an H100 it executes 18% fewer instructions and the kernel is 2-5% faster (small b64,
  // medium b4; bench/RESULTS.md).
  // FUSEC_SHORT_BWD_DS=0 measures the form without. (Two blocks a head, each holding one side
  // whole and half of the other so that two share an SM, measured slower at small b64 and the
  // same at medium b4, and were taken out: bench/RESULTS.md.)
  bool shortBackwardDs = true;
  // Row kernels whose row fits shared memory but not registers (GPT-2's cross-entropy over
  // 50,304 logits: 100 KB a row) stage it there once instead of streaming it from memory in
  // every pass (reduce_kernels.cpp RowRegisters::shared): GPT-2's cross-entropy 1.229 -> 0.665
  // ms, its step 18.18 -> 17.56 ms on an H100 (bench/RESULTS.md). FUSEC_ROW_SHARED=0 streams.
  bool rowShared = true;
  // Programmatic dependent launch (Hopper): every generated function begins by waiting for the
  // grid before it in the stream (griddepcontrol.wait) and then lets the grid after it launch
  // (griddepcontrol.launch_dependents), so the runtime launches it as a programmatic dependent
  // (codegen::Launch::dependent): its blocks are scheduled while its predecessor's last wave
  // runs, and the launch latency between two kernels of the step is hidden behind that wave.
  // Nothing of a kernel's body runs before its predecessor has finished and its writes are
  // visible, so results are unchanged. FUSEC_DEPENDENT_LAUNCH=0 launches as before.
  bool dependentLaunch = true;
  // Whether generated functions wait for their predecessor and may be launched as dependents.
  bool hasDependentLaunch() const { return dependentLaunch && major >= 9; }

  // Whether kernels may use wgmma: the flag, on the one architecture that has it.
  bool hasWgmma() const { return wgmma && major == 9 && minor == 0; }
  // NVRTC's -arch: "sm_90a" with wgmma (its cubins run on compute capability 9.0 only, the
  // device they are built for), else "sm_<major><minor>".
  std::string arch() const { return "sm_" + std::to_string(major) + std::to_string(minor) + (hasWgmma() ? "a" : ""); }
  bool operator==(const Target&) const = default;
};

// False when FUSEC_WGMMA=0: the mma.sync kernels instead of wgmma's, on a device or off it.
bool wgmmaAllowedByEnv();

// The switches the environment may set on a target: FUSEC_WGMMA_PRODUCER,
// FUSEC_WGMMA_PRODUCER_BWD, FUSEC_ROW_SHARED, FUSEC_DEPENDENT_LAUNCH and FUSEC_SHORT_BWD_DS
// ("1" on, "0" off, unset the default),
// FUSEC_WGMMA_FUSED_DQ (0, 1 or 2), FUSEC_WGMMA_BWD_MIN_SEQ, FUSEC_WGMMA_FWD_MIN_SEQ,
// FUSEC_SHORT_BWD_MAX_SEQ and FUSEC_SHORT_FWD_MAX_SEQ (lengths, 0 to 2^31),
// FUSEC_SHORT_FWD_MIN_HEADS_PER_SM (0 to 65535). Any other
// value is an Error naming the variable.
void applyEnvSwitches(Target& t);

// The target of sources and cubins made without a device (`fusec codegen`, `fusec compile
// --emit`): the default, an H100/H200's, with wgmma as FUSEC_WGMMA says.
Target offlineTarget();

}  // namespace fusec::codegen
