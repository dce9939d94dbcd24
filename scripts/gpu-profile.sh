#!/usr/bin/env bash
# On a GPU machine: build fusec (Release) into $FUSEC_BUILD (default build-gpu) and write
# `fusec profile` of the large-batch train steps, bf16 (small batch 64, medium batch 16) and
# any extra "model:batch" pairs in $FUSEC_PROFILE_EXTRA, to $OUT/profile-<model>-b<batch>.txt (and
# .json with FUSEC_PROFILE_JSON=1).
# FUSEC_PROFILE_TAG prefixes the file names (e.g. "before-"); FUSEC_PROFILE_NAIVE=1 adds small
# batch 64 with --attention=naive (profile-small-b64-naive.txt) for the fused/naive comparison.
# FUSEC_PROFILE_EVENTS=1 also profiles each pair with --timing events (the files' tag gets
# "events-"), to compare CUPTI's kernel durations with CUDA events around each launch.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${FUSEC_BUILD:-build-gpu}
OUT=${OUT:-$PWD/$BUILD/out}
TAG=${FUSEC_PROFILE_TAG:-}
mkdir -p "$OUT"
torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix" >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target ${FUSEC_PROFILE_TARGETS:-fusec} | tail -1
timings=(kernels)
[[ ${FUSEC_PROFILE_EVENTS:-0} == 1 ]] && timings+=(events)
for pair in small:64 medium:16 ${FUSEC_PROFILE_EXTRA:-}; do
  model=${pair%%:*} batch=${pair##*:}
  formats=(table)
  [[ ${FUSEC_PROFILE_JSON:-0} == 1 ]] && formats+=(json)
  for timing in "${timings[@]}"; do
    tag=$TAG
    [[ $timing == events ]] && tag+=events-
    for format in "${formats[@]}"; do
      "$BUILD/fusec" profile --model "$model" --program train_step --dtype bf16 --batch "$batch" --format "$format" \
        --timing "$timing" >"$OUT/${tag}profile-$model-b$batch.$( [[ $format == table ]] && echo txt || echo json)" \
        2>>"$OUT/${TAG}profile.err"
    done
  done
done
if [[ ${FUSEC_PROFILE_NAIVE:-0} == 1 ]]; then
  "$BUILD/fusec" profile --model small --program train_step --dtype bf16 --batch 64 --attention=naive \
    >"$OUT/${TAG}profile-small-b64-naive.txt" 2>>"$OUT/${TAG}profile.err"
fi
