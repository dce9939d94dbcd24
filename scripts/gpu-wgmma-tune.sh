#!/usr/bin/env bash
# On an H100 or H200: the wgmma attention kernels' tiles, kernel only (bench/attention_mma_tune:
# dense [NBATCH, N, d] bf16, causal, CUDA-event medians), one line a variant and length, beside
# the mma.sync kernels the generator picks at that head dim. A variant is
# "[ws=S.P.M] D FWD_WARPS FWD_QREG BWD_WARPS BQ [BC [BWD_BC]]" (make_variant.py; ws=: the forward
# with a producer warpgroup, S buffers, pingpong P, setmaxnreg M); WG_VARIANTS and
# MMA_VARIANTS replace the lists below, SEQS (default 1024 4096 8192) and NBATCH (default 16)
# the shapes. The generator's wgmma choice today: forward 8 warps, BC 128, with a producer
# warpgroup (ws=2.1.1); backward 8 warps, BQ 64, dQ's BC 64, no producer. The default lists
# put that choice beside its neighbours. Logs in $OUT.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$root/build-gpu/out}
mkdir -p "$OUT" /tmp/wgmma-tune
cd /tmp/wgmma-tune && rm -f ./*.cu
IFS=';' read -ra wg <<<"${WG_VARIANTS:-ws=2.1.1 64 8 0 8 64;64 8 0 8 64;ws=2.1.1 64 8 0 8 64 64;ws=2.1.1 128 8 0 8 64;128 8 0 8 64;ws=2.1.1 128 8 0 8 64 64;ws=3.1.1 128 8 0 8 64}"
IFS=';' read -ra mma <<<"${MMA_VARIANTS:-64 4 0 4 64;128 4 1 4 32}"
# make_variant.py takes the prefix after the fifth field: D FW FQ BW BQ PREFIX [BC [BWD_BC]].
variant() {  # PREFIX [--wgmma] FIELDS...
  local prefix=$1 flag=()
  shift
  if [[ $1 == --wgmma ]]; then flag=(--wgmma); shift; fi
  if [[ $1 == ws=* ]]; then flag+=("--$1"); shift; fi
  python3 "$root/bench/attention_mma_tune/make_variant.py" "${flag[@]}" "$root/codegen" "${@:1:5}" "$prefix" "${@:6}"
}
# A blank list entry (MMA_VARIANTS=" ": none) is skipped.
for c in "${wg[@]}"; do [[ -n ${c// /} ]] || continue; variant w --wgmma $c || exit 1; done
for c in "${mma[@]}"; do [[ -n ${c// /} ]] || continue; variant m $c || exit 1; done
SEQS=${SEQS:-1024 4096 8192} "$root/bench/attention_mma_tune/run.sh" 2>&1 | tee "$OUT/wgmma-tune.txt"
