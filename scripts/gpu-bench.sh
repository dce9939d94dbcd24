#!/usr/bin/env bash
# On a GPU machine: the tables of bench/RESULTS.md. Builds fusec (Release, with LibTorch for
# the eager side, the fusec-eager worker) into build-gpu/ and runs `fusec bench` on small, medium and large at ctx
# 256, batch 4, fp32 and bf16, every pass; `fusec profile` of small's train_step in both
# dtypes; and, with FUSEC_BENCH_ATTENTION=1, the attention sweep. Output in $OUT (defaults to
# build-gpu/out): bench.txt, profile-*.txt, attention.txt, and the stderr logs.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-gpu
OUT=${OUT:-$PWD/$BUILD/out}
mkdir -p "$OUT"
torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix" >/dev/null 2>&1
cmake --build "$BUILD" -j"$(nproc)" --target fusec fusec-eager | tail -1
fusec=$BUILD/fusec
for dtype in bf16 fp32; do
  "$fusec" profile --model small --program train_step --dtype "$dtype" >"$OUT/profile-small-$dtype.txt" 2>"$OUT/profile.err" || true
done
"$fusec" bench --model "${FUSEC_BENCH_MODELS:-small,medium,large}" --ctx 256 --batch 4 --dtype fp32,bf16 \
  --passes forward,fwd_bwd,step --warmup 5 --iters 10 --out "$OUT/bench.txt" 2>"$OUT/bench.err"
if [[ ${FUSEC_BENCH_ATTENTION:-0} == 1 ]]; then
  "$fusec" bench attention --out "$OUT/attention.txt" 2>"$OUT/attention.err"
fi
