#!/usr/bin/env bash
# On a GPU machine, one call for a codegen change: build fusec and the GPU tests (build-gpu),
# run the GPU tests matching TESTS (a ctest -R regex; default the attention kernels and the
# executable against the interpreter), then time the change against commit REV with
# scripts/gpu-before-after.sh (SCALE, ROUNDS, STEPS, PROFILE as there; default SCALE
# "small:64 medium:4", ROUNDS 2; REV "-" skips it). ENV_AB="NAME=A NAME=B ..." also A/Bs
# environment settings with this build (scripts/gpu-env-ab.sh, same SCALE and ROUNDS). Each
# part has its own time limit (TEST_LIMIT, AB_LIMIT seconds) so one that hangs leaves the
# others their share of the call. A one-screen summary goes to $OUT/summary.txt (and
# stdout); the logs beside it.
#   scripts/gpu-verify-change.sh 1782faa
#   ENV_AB="FUSEC_SIDE_STREAM=0 FUSEC_SIDE_STREAM=1" PROFILE=1 scripts/gpu-verify-change.sh -
set -uo pipefail
cd "$(dirname "$0")/.."
REV=${1:?usage: scripts/gpu-verify-change.sh REV}
OUT=${OUT:-$PWD/build-gpu/out}
TESTS=${TESTS:-Executable|AttentionKernel|FusedAttention}
mkdir -p "$OUT"
rm -f "$OUT/profiles.txt"  # a warm machine's, from an earlier call
export OUT NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
S=$OUT/summary.txt
nvidia-smi -L >"$S"
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
{ cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release ${prefix:+-DCMAKE_PREFIX_PATH=$prefix} >/dev/null &&
    cmake --build build-gpu -j"$(nproc)" --target fusec fusec_gpu_tests 2>&1 | tail -1; } >>"$S" 2>&1 ||
  { echo "error: the build failed" | tee -a "$S"; cat "$S"; exit 1; }
(cd build-gpu && timeout "${TEST_LIMIT:-240}" ctest -L gpu -R "$TESTS" --output-on-failure -V -j8 >"$OUT/gpu-tests.log" 2>&1
 echo "ctest rc=$?")>>"$S"
grep -E "tests passed|\(Failed\)|\*\*\*Failed|rel err .*e\+|d\(QKV\)" "$OUT/gpu-tests.log" | sort -u | tail -40 >>"$S"
if [[ -n ${ENV_AB:-} ]]; then
  read -ra ab <<<"$ENV_AB"
  SCALE=${SCALE-small:64 medium:4} ROUNDS=${ROUNDS:-2} timeout "${AB_LIMIT:-300}" scripts/gpu-env-ab.sh "${ab[@]}" \
    >"$OUT/env-ab.txt" 2>&1
  echo "env-ab rc=$?" >>"$S"
  grep -E "median|error|failed|->|round|whole step" "$OUT/env-ab.txt" >>"$S"
fi
if [[ $REV != - ]]; then
  SCALE=${SCALE-small:64 medium:4} ROUNDS=${ROUNDS:-2} timeout "${AB_LIMIT:-300}" scripts/gpu-before-after.sh "$REV" \
    >"$OUT/before-after.txt" 2>&1
  echo "before-after rc=$?" >>"$S"
  grep -E "median|error|failed|->" "$OUT/before-after.txt" >>"$S"
fi
# PROFILE=1: gpu-env-ab.sh's excerpts first; the summary last (the device tool returns the end).
[[ -e $OUT/profiles.txt ]] && cat "$OUT/profiles.txt"
cat "$S"
