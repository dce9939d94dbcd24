#!/usr/bin/env bash
# On a GPU machine: the one-launch short backward (attention_mma.cuh fa_backward_short) with
# its copies at once and staged in chunks (FUSEC_SHORT_BWD_STAGED), in one call. Builds fusec
# and the GPU tests (Release, build-gpu), runs the short backward's GPU test (both forms bit for
# bit against the two passes), then small's bf16 train step (batch 64, ctx 256) ROUNDS times
# (default 3) each way, alternating, and `fusec profile` of each; NCU=1 adds Nsight Compute on
# the backward kernel each way. Logs and tables in $OUT (default build-gpu/out).
#   scripts/gpu-short-bwd.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/build-gpu/out}
ROUNDS=${ROUNDS:-3}
mkdir -p "$OUT"
torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)' 2>/dev/null)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release ${torch_prefix:+-DCMAKE_PREFIX_PATH=$torch_prefix} >/dev/null &&
  cmake --build build-gpu -j"$(nproc)" --target fusec fusec_gpu_tests | tail -1 || { echo "error: the build failed" >&2; exit 1; }
F=build-gpu/fusec
build-gpu/tests/gpu/fusec_gpu_tests --gtest_filter='FusedAttention.ShortBackward*' 2>&1 | tail -4 | tee "$OUT/short-test.txt"
declare -A meds
for ((r = 1; r <= ROUNDS; ++r)); do
  for staged in 0 1; do
    log=$OUT/short-step-$staged-$r.log
    FUSEC_SHORT_BWD_STAGED=$staged $F run --program train_step --model small --dtype bf16 --random-inputs --batch 64 --ctx 256 \
      --steps 30 >"$log" 2>&1
    t=$(grep -o 'median step [0-9.]*' "$log" | awk '{print $3}')
    echo "small b64 round $r staged=$staged: ${t:-failed ($(tail -1 "$log"))} ms"
    meds[$staged]+="${t:-} "
  done
done
for staged in 0 1; do
  printf 'staged=%s: median of medians %s ms\n' "$staged" \
    "$(echo "${meds[$staged]}" | tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print NR % 2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')"
done
for staged in 0 1; do
  FUSEC_SHORT_BWD_STAGED=$staged $F profile --model small --program train_step --dtype bf16 --batch 64 \
    >"$OUT/short-profile-$staged.txt" 2>&1
  echo "profile staged=$staged:"; grep -iE "^ *attention|flash_bwd|step" "$OUT/short-profile-$staged.txt" | head -6
done
if [[ ${NCU:-0} == 1 ]]; then
  for staged in 0 1; do
    FUSEC_SHORT_BWD_STAGED=$staged ${NCU_BIN:-/usr/local/cuda/bin/ncu} --clock-control none --kernel-name regex:flash_bwd_bwd \
      --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
      --section SchedulerStats --section SourceCounters -f -o "build-gpu/short-$staged" \
      $F profile --model small --program train_step --dtype bf16 --batch 64 --timing events --warmup 2 --iters 1 \
      >"$OUT/ncu-run-$staged.log" 2>&1 &&
      ${NCU_BIN:-/usr/local/cuda/bin/ncu} -i "build-gpu/short-$staged.ncu-rep" --page details >"$OUT/ncu-short-$staged.txt"
  done
fi
