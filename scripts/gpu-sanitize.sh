#!/usr/bin/env bash
# On a GPU machine: compute-sanitizer over the fused attention kernels (issue 41's "clean on the
# new kernels": the wgmma forward with its producer warpgroup, the dQ and dK/dV passes, grouped
# query heads) and a model step's kernels. Builds fusec_gpu_tests into build-gpu/ (as
# gpu-check.sh does), then runs each tool on a gtest filter, one log a tool in $OUT
# (sanitize-TOOL.log), and prints each tool's summary line. A tool's own time limit
# (SANITIZE_TIMEOUT seconds, default 240) keeps one slow tool from taking the whole call.
#   TOOLS="memcheck synccheck racecheck" (default), FILTER (a gtest filter; the default below),
#   SANITIZE_ARGS (more compute-sanitizer options, e.g. "--racecheck-report hazard" to see
#   which access came first)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=build-gpu
OUT=${OUT:-$PWD/$BUILD/out}
mkdir -p "$OUT"
TOOLS=${TOOLS:-memcheck synccheck racecheck}
FILTER=${FILTER:-FusedAttention.ProducerWarpgroupKernelsMatchBitForBit:FusedAttention.GroupedQueryHeadsMatchTheInterpreter:FusedAttention.DkDvWithoutDq:Models/KernelRun.*/tiny_train_step_bf16_ctx13}
torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release ${torch_prefix:+-DCMAKE_PREFIX_PATH="$torch_prefix"} >/dev/null &&
  cmake --build "$BUILD" -j"$(nproc)" --target fusec_gpu_tests | tail -1 || exit 1
status=0
for tool in $TOOLS; do
  log=$OUT/sanitize-$tool.log
  echo "== compute-sanitizer --tool $tool ($FILTER)"
  timeout "${SANITIZE_TIMEOUT:-240}" compute-sanitizer --tool "$tool" --error-exitcode 3 ${SANITIZE_ARGS:-} \
    "$BUILD"/tests/gpu/fusec_gpu_tests --gtest_filter="$FILTER" >"$log" 2>&1
  rc=$?
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|tests? (passed|failed)|PASSED|FAILED" "$log" | tail -4
  case $rc in
    0) echo "$tool: clean" ;;
    124) echo "$tool: stopped after ${SANITIZE_TIMEOUT:-240} s (see $log)" ;;
    *) echo "$tool: exit $rc (see $log)"; status=1 ;;
  esac
done
exit $status
