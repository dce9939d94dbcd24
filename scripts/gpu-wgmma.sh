#!/usr/bin/env bash
# On an H100 or H200: the bf16 attention kernels on wgmma (codegen/attention_wgmma.cuh)
# against the mma.sync ones (FUSEC_WGMMA=0) in the same call. Builds fusec and the GPU
# tests into build-gpu/, runs the fused attention tests and every model kernel against the
# interpreter (WG_TESTS, a gtest filter), then `fusec bench attention` (bf16, fused; WG_D,
# WG_SEQ, WG_BATCH) with and without wgmma, PyTorch SDPA's backends beside them (WG_TORCH=0
# leaves them out; WG_BASELINE=0 the mma.sync rows; WG_NOPRODUCER=1, WG_PRODUCER_BWD=1 and
# WG_FUSED_DQ add rows below; WG_SHORT=1 small's attention shape; WG_LONG=0 none but those;
# WG_PROFILE `fusec profile` of model steps), and the bf16 train step of
# WG_MODELS (model:batch) under each of WG_STEP_SETS (default: WG_STEP_ENV, itself FUSEC_WGMMA
# unless given, 0 and 1) in turn, WG_ROUNDS times. Logs in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=build-gpu
OUT=${OUT:-$PWD/$BUILD/out}
mkdir -p "$OUT" "$BUILD"
torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)' 2>/dev/null)
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix" >"$OUT/cmake.log" 2>&1
if ! cmake --build "$BUILD" -j"$(nproc)" --target fusec fusec_gpu_tests >"$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"
  exit 1
fi
fusec=$BUILD/fusec
if [[ ${WG_TESTS:-FusedAttention.*:*KernelRun*} != none ]]; then
  echo "== GPU tests (${WG_TESTS:-FusedAttention.*:*KernelRun*})"
  timeout "${WG_TEST_TIMEOUT:-300}" "$BUILD/tests/gpu/fusec_gpu_tests" --gtest_filter="${WG_TESTS:-FusedAttention.*:*KernelRun*}" \
    >"$OUT/gtest.log" 2>&1
  rc=$?
  grep -E "^\[  (PASSED|FAILED) |Failure|rel err [1-9]e-0[0-2]|rel err (nan|inf)" "$OUT/gtest.log" | head -40
  # WG_STOP_ON_FAIL=1: no benchmarks after a failed or timed-out test (a kernel that hangs).
  [[ $rc != 0 && ${WG_STOP_ON_FAIL:-0} == 1 ]] && { echo "tests rc=$rc: stopping"; tail -5 "$OUT/gtest.log"; exit 1; }
fi
bench() {  # LABEL [VAR=VALUE ...] [extra flags]: the bench under those variables, into attention-LABEL.txt
  [[ ${WG_BENCH:-1} == 0 ]] && return 0  # WG_BENCH=0: no attention benches (steps only)
  local label=$1 envs=()
  shift
  while [[ $# -gt 0 && $1 == *=* ]]; do envs+=("$1"); shift; done
  env "${envs[@]}" timeout 240 "$fusec" bench attention --impl fused --dtype bf16 --d "${WG_D:-64,128}" \
    --seq "${WG_SEQ:-4096,8192}" --batch "${WG_BATCH:-8}" --warmup 5 --iters 20 "$@" >"$OUT/attention-$label.txt" \
    2>"$OUT/attention-$label.err"
  echo "== bench attention, $label: ${envs[*]}"
  cat "$OUT/attention-$label.txt"
  tail -3 "$OUT/attention-$label.err"
}
torch_flag=--vs-torch
[[ ${WG_TORCH:-1} == 0 ]] && torch_flag=
# WG_LONG=0: none of the rows at WG_D x WG_SEQ (only WG_SHORT's and the steps).
if [[ ${WG_LONG:-1} != 0 ]]; then
  [[ ${WG_BASELINE:-1} == 0 ]] || bench mma FUSEC_WGMMA=0
  bench wgmma FUSEC_WGMMA=1 $torch_flag
fi
# WG_NOPRODUCER=1: the wgmma forward without its producer warpgroup too; WG_PRODUCER_BWD=1 the
# backward's dK/dV with one (FUSEC_WGMMA_PRODUCER_BWD=1).
[[ ${WG_NOPRODUCER:-0} == 1 ]] && bench noproducer FUSEC_WGMMA=1 FUSEC_WGMMA_PRODUCER=0
[[ ${WG_PRODUCER_BWD:-0} == 1 ]] && bench producer-bwd FUSEC_WGMMA=1 FUSEC_WGMMA_PRODUCER_BWD=1
# WG_FUSED_DQ (a list of 0, 1, 2): the causal backward in two passes / in one, its warpgroups
# adding dQ / with a dQ writer (FUSEC_WGMMA_FUSED_DQ), a row set each beside the default's.
for mode in ${WG_FUSED_DQ:-}; do
  bench "fused-dq-$mode" FUSEC_WGMMA=1 FUSEC_WGMMA_FUSED_DQ="$mode"
done
# WG_SHORT=1: small's own attention shape (d 64, N 256, batch x heads 768, dense) with the
# backward in one launch (the default at that length, fa_backward_short), SDPA's backends
# beside it, then in the two mma.sync passes (FUSEC_SHORT_BWD_MAX_SEQ=0) and on wgmma
# (FUSEC_WGMMA_BWD_MIN_SEQ=0); WG_SHORT=2 adds wgmma's one-pass forms (FUSEC_WGMMA_FUSED_DQ=1, 2).
if [[ ${WG_SHORT:-0} != 0 ]]; then
  WG_D=64 WG_SEQ=256 WG_BATCH=768 bench short-one-launch $torch_flag
  WG_D=64 WG_SEQ=256 WG_BATCH=768 bench short-two-passes FUSEC_SHORT_BWD_MAX_SEQ=0
  WG_D=64 WG_SEQ=256 WG_BATCH=768 bench short-wgmma FUSEC_WGMMA_BWD_MIN_SEQ=0
  if [[ ${WG_SHORT} == 2 ]]; then
    for mode in 1 2; do
      WG_D=64 WG_SEQ=256 WG_BATCH=768 bench "short-fused-dq-$mode" FUSEC_WGMMA_BWD_MIN_SEQ=0 FUSEC_WGMMA_FUSED_DQ=$mode
    done
  fi
fi
# WG_PROFILE="model:batch ...": `fusec profile` of each bf16 train step (ctx 256) under
# WG_PROFILE_ENV, its category table into profile-<model>.txt and the attention rows printed.
for mb in ${WG_PROFILE:-}; do
  read -ra penv <<<"${WG_PROFILE_ENV:-}"
  env "${penv[@]}" timeout 180 "$fusec" profile --program train_step --model "${mb%:*}" --dtype bf16 --batch "${mb#*:}" \
    --ctx 256 >"$OUT/profile-${mb%:*}.txt" 2>&1
  echo "== profile ${mb%:*} b${mb#*:} ${WG_PROFILE_ENV:-}"
  grep -iE "attention|category|step|total" "$OUT/profile-${mb%:*}.txt" | head -30
done
# The train step of WG_MODELS (model:batch) under each of WG_STEP_SETS (sets of VAR=VALUE
# separated by '|'; default: WG_STEP_ENV, FUSEC_WGMMA unless given, 0 and 1) in turn, WG_ROUNDS times.
step_env=${WG_STEP_ENV:-FUSEC_WGMMA}
IFS='|' read -ra step_sets <<<"${WG_STEP_SETS:-$step_env=0|$step_env=1}"
for round in $(seq "${WG_ROUNDS:-2}"); do
  for mb in ${WG_MODELS:-small:64 medium:16}; do
    for set in "${step_sets[@]}"; do
      read -ra vars <<<"$set"
      env "${vars[@]}" timeout 120 "$fusec" run --program train_step --model "${mb%:*}" --dtype bf16 --random-inputs \
        --batch "${mb#*:}" --ctx 256 --steps 30 >"$OUT/step.log" 2>&1
      echo "step ${mb%:*} b${mb#*:} ${set:-(defaults)} round $round: $(grep 'median step' "$OUT/step.log" || tail -2 "$OUT/step.log")"
    done
  done
done
