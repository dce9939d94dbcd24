#!/usr/bin/env bash
# On a GPU machine, with .prebuilt/ carried (scripts/prebuild-for-device made it): the GPU
# tests matching GTEST (a --gtest_filter, default the executable and the attention kernels;
# SHARD=I/N runs part I of N of them)
# and, with ENV_AB="NAME=A NAME=B", scripts/gpu-env-ab.sh on the prebuilt fusec (SCALE,
# ROUNDS, PROFILE as there). No build: for a call whose device time cannot pay for one.
# Summary on stdout and in $OUT/summary.txt.
#   ENV_AB="FUSEC_SIDE_STREAM=0 FUSEC_SIDE_STREAM=1" PROFILE=1 scripts/gpu-prebuilt.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/build-gpu/out}
mkdir -p "$OUT" build-gpu
rm -f "$OUT/profiles.txt"  # a warm machine's, from an earlier call
export OUT LD_LIBRARY_PATH=$PWD/.prebuilt:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
S=$OUT/summary.txt
[[ -x .prebuilt/fusec ]] || { echo "error: no .prebuilt/fusec (run scripts/prebuild-for-device here and carry .prebuilt)" | tee "$S"; exit 1; }
cp .prebuilt/fusec build-gpu/fusec
# The GPU tests that run fusec as a user would (RunOnDevice, Device.CliEntryPoint) run this one,
# not the path of the build tree they were built in (tests/unit/test_util.h fusecBinary).
export FUSEC_TEST_BINARY=$PWD/build-gpu/fusec
echo "prebuilt at $(cat .prebuilt/commit 2>/dev/null)" >"$S"
build-gpu/fusec device >>"$S" 2>&1 || { echo "error: the prebuilt fusec does not run here" | tee -a "$S"; exit 1; }
# SHARD=I/N: the I-th of N parts of those tests (gtest's sharding), for a suite longer than a call.
if [[ -n ${SHARD:-} ]]; then
  [[ $SHARD =~ ^([0-9]+)/([1-9][0-9]*)$ ]] && ((BASH_REMATCH[1] < BASH_REMATCH[2])) ||
    { echo "error: SHARD='$SHARD' is not I/N with 0 <= I < N" | tee -a "$S"; exit 1; }
  export GTEST_SHARD_INDEX=${BASH_REMATCH[1]} GTEST_TOTAL_SHARDS=${BASH_REMATCH[2]}
  echo "gpu tests: shard $SHARD" >>"$S"
fi
timeout "${TEST_LIMIT:-120}" .prebuilt/fusec_gpu_tests --gtest_filter="${GTEST:-*Executable*:*FusedAttention*}" >"$OUT/gpu-tests.log" 2>&1
rc=$?
echo "gpu tests rc=$rc" >>"$S"
# Stopped by TEST_LIMIT: the test that was running (a hang, or a cold kernel cache's compiles).
((rc == 124)) && echo "stopped during: $(grep -o '\[ RUN      \] .*' "$OUT/gpu-tests.log" | tail -1)" >>"$S"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |differ|side stream" "$OUT/gpu-tests.log" | sort -u | head -30 >>"$S"
if [[ -n ${ENV_AB:-} ]]; then
  read -ra ab <<<"$ENV_AB"
  NO_BUILD=1 SCALE=${SCALE-small:64 medium:4} ROUNDS=${ROUNDS:-2} timeout "${AB_LIMIT:-200}" scripts/gpu-env-ab.sh "${ab[@]}" \
    >"$OUT/env-ab.txt" 2>&1
  echo "env-ab rc=$?" >>"$S"
  grep -E "median|round|whole step|error" "$OUT/env-ab.txt" >>"$S"
fi
scripts/pack-out.sh >&2  # over 8 files (the device tool's limit): the logs into one archive
# PROFILE=1: gpu-env-ab.sh's excerpts first; the summary last (the device tool returns the end).
[[ -e $OUT/profiles.txt ]] && cat "$OUT/profiles.txt"
cat "$S"
