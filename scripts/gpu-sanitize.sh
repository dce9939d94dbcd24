#!/usr/bin/env bash
# On a GPU machine: compute-sanitizer over the fused attention kernels (issue 41's "clean on the
# new kernels": the wgmma forward with its producer warpgroup, the dQ and dK/dV passes, grouped
# query heads) and a model step's kernels. Builds fusec_gpu_tests into build-gpu/ (as
# gpu-check.sh does), then runs each tool on a gtest filter, one log a tool in $OUT
# (sanitize-TOOL.log), and prints each tool's summary line. A tool's own time limit
# (SANITIZE_TIMEOUT seconds, default 240) keeps one slow tool from taking the whole call.
#   TOOLS="memcheck synccheck racecheck" (default), FILTER (a gtest filter; the default below),
#   SANITIZE_ARGS (more compute-sanitizer options, e.g. "--racecheck-report hazard" to see
#   which access came first), PREBUILT=1 (the carried .prebuilt/fusec_gpu_tests, no build)
#
# racecheck and mbarriers: racecheck credits a waiter with only part of an mbarrier phase's
# arrivals. scripts/probes/racecheck_mbarrier.cu shows it: eight reader warps that each arrive
# once on a barrier of count 8, then a writer that waits on it, is reported as WAR hazards;
# with one reader and count 1 it is clean. The producer-warpgroup dK/dV kernel's empty
# barriers count its eight consumer warps, and its consumers read the row statistics with
# plain loads, so racecheck reports its ring as racing (the forward's consumers read their
# ring only through wgmma, which racecheck does not see). So racecheck runs the probe first
# and, where the probe shows that blind spot, leaves ProducerWarpgroupKernelsMatchBitForBit
# out of its filter (memcheck and synccheck still run it).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=build-gpu
OUT=${OUT:-$PWD/$BUILD/out}
mkdir -p "$OUT"
TOOLS=${TOOLS:-memcheck synccheck racecheck}
FILTER=${FILTER:-FusedAttention.ProducerWarpgroupKernelsMatchBitForBit:FusedAttention.GroupedQueryHeadsMatchTheInterpreter:FusedAttention.DkDvWithoutDq:Models/KernelRun.*/tiny_train_step_bf16_ctx13}
# PREBUILT=1: the tests scripts/prebuild-for-device built here (carried as .prebuilt), no build.
if [[ ${PREBUILT:-0} == 1 ]]; then
  TESTS_BIN=.prebuilt/fusec_gpu_tests
  [[ -x $TESTS_BIN ]] || { echo "error: no $TESTS_BIN (run scripts/prebuild-for-device here and carry .prebuilt)" >&2; exit 1; }
  export LD_LIBRARY_PATH=$PWD/.prebuilt:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  export FUSEC_TEST_BINARY=$PWD/.prebuilt/fusec  # tests/unit/test_util.h fusecBinary
else
  TESTS_BIN=$BUILD/tests/gpu/fusec_gpu_tests
  torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release ${torch_prefix:+-DCMAKE_PREFIX_PATH="$torch_prefix"} >/dev/null &&
    cmake --build "$BUILD" -j"$(nproc)" --target fusec_gpu_tests | tail -1 || exit 1
fi
status=0
# Prints the filter racecheck gets: FILTER, less the producer-warpgroup test where the probe
# finds racecheck blind to multi-arrival phases.
racecheck_filter() {
  local probe=$OUT/racecheck-probe
  if ! nvcc -arch=sm_90 -o "$probe" scripts/probes/racecheck_mbarrier.cu >&2; then
    echo "racecheck probe: nvcc failed; racecheck keeps the whole filter" >&2
    echo "$FILTER"
    return
  fi
  compute-sanitizer --tool racecheck --racecheck-report hazard "$probe" >"$OUT/sanitize-racecheck-probe.log" 2>&1
  if grep -q "probe<(int)0, (int)8>" "$OUT/sanitize-racecheck-probe.log"; then
    echo "racecheck probe: a correct 8-arrival mbarrier handoff is reported as a hazard; the producer-warpgroup test is left out of racecheck" >&2
    echo "$FILTER" | tr ':' '\n' | grep -vx 'FusedAttention.ProducerWarpgroupKernelsMatchBitForBit' | paste -sd: -
  else
    echo "racecheck probe: multi-arrival mbarrier handoffs are seen; racecheck keeps the whole filter" >&2
    echo "$FILTER"
  fi
}
for tool in $TOOLS; do
  log=$OUT/sanitize-$tool.log
  filter=$FILTER
  [[ $tool == racecheck ]] && filter=$(racecheck_filter)
  echo "== compute-sanitizer --tool $tool ($filter)"
  timeout "${SANITIZE_TIMEOUT:-240}" compute-sanitizer --tool "$tool" --error-exitcode 3 ${SANITIZE_ARGS:-} \
    "$TESTS_BIN" --gtest_filter="$filter" >"$log" 2>&1
  rc=$?
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|tests? (passed|failed)|PASSED|FAILED" "$log" | tail -4
  case $rc in
    0) echo "$tool: clean" ;;
    124) echo "$tool: stopped after ${SANITIZE_TIMEOUT:-240} s (see $log)" ;;
    *) echo "$tool: exit $rc (see $log)"; status=1 ;;
  esac
done
OUT=$OUT scripts/pack-out.sh >&2  # over 8 files (the device tool's limit): the logs into one archive
exit $status
