#!/usr/bin/env bash
# On a GPU machine: build fusec (Release, into $FUSEC_BUILD, default build-gpu) and run Nsight
# Compute on chosen kernels of one bf16 train step, to see why a generated kernel sits below
# the copy ceiling (occupancy, stall reasons, DRAM throughput).
#   scripts/gpu-ncu.sh MODEL BATCH KERNEL...
# Each KERNEL is a function-name regex (e.g. 'row_reduce_9_rmsnorm'); its first launch is
# profiled. Writes $OUT/ncu-MODEL-bBATCH.txt (details pages: speed of light, launch, occupancy,
# warp state, memory workload, and the SASS lines where warps stall most); the reports and
# logs stay in $BUILD/ncu.
# Clocks are left as the device runs them (--clock-control none), as fusec profile sees them.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 3 ]] || { echo "usage: scripts/gpu-ncu.sh MODEL BATCH KERNEL..." >&2; exit 2; }
model=$1 batch=$2
shift 2
BUILD=${FUSEC_BUILD:-build-gpu}
OUT=${OUT:-$PWD/$BUILD/out}
NCU=${NCU:-/usr/local/cuda/bin/ncu}
mkdir -p "$OUT" "$BUILD/ncu"
torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix" >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target fusec | tail -1
name=$model-b$batch
: >"$OUT/ncu-$name.txt"
for regex in "$@"; do
  rep="$BUILD/ncu/$name-${regex//[^A-Za-z0-9_]/_}"
  # Two warm-up runs (the graph capture needs them) and one timed run (events: ncu holds CUPTI,
  # which --timing kernels would need): ncu replays the
  # selected launch itself, the rest only has to reach it.
  "$NCU" --clock-control none --kernel-name "regex:$regex" --launch-count 1 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section SchedulerStats --section SourceCounters -f -o "$rep" \
    "$BUILD/fusec" profile --model "$model" --program train_step --dtype bf16 --batch "$batch" --timing events \
    --warmup 2 --iters 1 >"$rep.log" 2>&1 || { tail -20 "$rep.log" >&2; exit 1; }
  "$NCU" -i "$rep.ncu-rep" --page details >>"$OUT/ncu-$name.txt"
done
