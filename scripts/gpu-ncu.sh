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
# Also the stall reasons per issued instruction, one line each, sorted ($OUT/ncu-MODEL-bBATCH-stalls.txt).
# FUSEC=.prebuilt/fusec (scripts/prebuild-for-device here, .prebuilt carried) skips the build.
# SASS=1 also writes each kernel's per-instruction source page ($OUT/ncu-MODEL-bBATCH-REGEX-sass.csv).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 3 ]] || { echo "usage: scripts/gpu-ncu.sh MODEL BATCH KERNEL..." >&2; exit 2; }
model=$1 batch=$2
shift 2
BUILD=${FUSEC_BUILD:-build-gpu}
OUT=${OUT:-$PWD/$BUILD/out}
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
mkdir -p "$OUT" "$BUILD/ncu"
F=${FUSEC:-}
if [[ -z $F ]]; then
  torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix" >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" --target fusec | tail -1
  F=$BUILD/fusec
elif [[ $F == .prebuilt/* ]]; then
  export LD_LIBRARY_PATH=$PWD/.prebuilt:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
fi
name=$model-b$batch
: >"$OUT/ncu-$name.txt"
for regex in "$@"; do
  rep="$BUILD/ncu/$name-${regex//[^A-Za-z0-9_]/_}"
  # Two warm-up runs (the graph capture needs them) and one timed run (events: ncu holds CUPTI,
  # which --timing kernels would need): ncu replays the
  # selected launch itself, the rest only has to reach it.
  "$NCU" --clock-control none --kernel-name "regex:$regex" --launch-count 1 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section SchedulerStats --section SourceCounters \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' -f -o "$rep" \
    "$F" profile --model "$model" --program train_step --dtype bf16 --batch "$batch" --timing events \
    --warmup 2 --iters 1 >"$rep.log" 2>&1 || { tail -20 "$rep.log" >&2; exit 1; }
  "$NCU" -i "$rep.ncu-rep" --page details >>"$OUT/ncu-$name.txt"
  # Every SASS instruction with its sampled stall reasons (SourceCounters), for a look here
  # at where the warps wait: SASS=1 (a few MB a kernel).
  if [[ -n ${SASS:-} ]]; then
    "$NCU" -i "$rep.ncu-rep" --page source --csv --print-source sass \
      >"$OUT/ncu-$name-${regex//[^A-Za-z0-9_]/_}-sass.csv" 2>&1 || true
  fi
  # Stall reasons, cycles per issued instruction (the raw metrics the warp-state section sums).
  "$NCU" -i "$rep.ncu-rep" --page raw --csv 2>/dev/null |
    python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
if len(rows) >= 3:
    head, vals = rows[0], rows[2]
    pre, post = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
    got = sorted(((float(v), h[len(pre):-len(post)]) for h, v in zip(head, vals)
                  if h.startswith(pre) and h.endswith(post) and v.replace(".", "", 1).isdigit()), reverse=True)
    print(sys.argv[1] + ": " + ", ".join(f"{n} {x:.2f}" for x, n in got if x >= 0.05))
' "$regex" >>"$OUT/ncu-$name-stalls.txt" || true
done
cat "$OUT/ncu-$name-stalls.txt" 2>/dev/null || true
