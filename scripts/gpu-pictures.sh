#!/usr/bin/env bash
# On a GPU machine: the measurements behind bench/RESULTS.md's pictures (issue 15), into $OUT
# (default build-gpu/out): builds fusec, the eager worker and the timing tests (Release, into
# build-gpu/), runs the profile tests (the --trace schema among them), then writes
#   bench.jsonl          small b4, fp32 and bf16, forward / fwd_bwd / step, eager and compiled
#   bench-torch.jsonl    small b4 bf16 step with torch.compile (default and reduce-overhead)
#   attention.jsonl      the causal attention sweep, d 64 and 128, N up to 65536 (OOM rows kept)
#   profile-fp32.json, profile-bf16.json   fusec profile of small train_step at batch 16
#   trace-small-bf16.json                  fusec profile --trace of small bf16 train_step, batch 4
# and logs. bench/plot.py turns the JSON into the PNGs (here, where matplotlib is).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${FUSEC_BUILD:-build-gpu}
OUT=${OUT:-$PWD/$BUILD/out}
mkdir -p "$OUT"
LOG=$OUT/pictures.log
torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix" >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target fusec fusec-eager fusec_gpu_timing_tests | tail -1
f=$BUILD/fusec
status=0
(cd "$BUILD" && ctest -R '^Profile\.' --output-on-failure) >"$OUT/ctest.log" 2>&1 || status=1
{
  "$f" bench --model small --batch 4 --ctx 256 --dtype fp32,bf16 --format json --out "$OUT/bench.jsonl"
  "$f" bench --model small --batch 4 --ctx 256 --dtype bf16 --passes step --vs-torch --format json \
    --out "$OUT/bench-torch.jsonl"
  "$f" bench attention --d 64,128 --seq 1024,4096,16384,65536 --impl eager,compiled,fused --format json \
    --out "$OUT/attention.jsonl"
  for dtype in fp32 bf16; do
    "$f" profile --model small --program train_step --dtype $dtype --batch 16 --format json >"$OUT/profile-$dtype.json"
  done
  "$f" profile --model small --program train_step --dtype bf16 --batch 4 --trace "$OUT/trace-small-bf16.json" >/dev/null
} 2>>"$LOG" || status=1
exit $status
