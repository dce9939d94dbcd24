#!/usr/bin/env bash
# Writes the CUDA source of every kernel fusec generates for a corpus of programs (the zoo's
# models in f32 and bf16, forward and train_step, naive and fused attention, a data-parallel
# sharded step, and every .fir under tests/lit/codegen) into DIR, one folder a program, and
# prints one hash of them all. A codegen refactor that claims byte-identical kernels runs it
# before and after and compares the hashes (diff -r DIR1 DIR2 shows where they differ).
#   scripts/kernel-sources.sh build/fusec /tmp/kernels-before
set -euo pipefail
fusec=$1 out=$2
rm -rf "$out" && mkdir -p "$out"
emit() {  # NAME FIR
  mkdir -p "$out/$1"
  "$fusec" codegen "$2" --emit cuda --out-dir "$out/$1" >/dev/null
}
for model in tiny small medium; do
  for dtype in fp32 bf16; do
    for program in forward train_step; do
      for attention in naive fused; do
        name=$model-$dtype-$program-$attention ctx=128
        [[ $model == tiny ]] && ctx=16
        "$fusec" compile --model "$model" --dtype "$dtype" --program "$program" --batch 4 --ctx $ctx --attention "$attention" \
          >"$out/$name.fir"
        emit "$name" "$out/$name.fir"
      done
    done
  done
done
"$fusec" compile --model small --dtype bf16 --program train_step --batch 4 --ctx 128 --gpus 2 --shard-optimizer >"$out/dp.fir"
emit dp "$out/dp.fir"
# The embedding gradient's long paths: every position listed and sorted (16,384 positions),
# listed in rounds with positions past 16 bits (81,920).
for bt in 16:1024 80:1024; do
  "$fusec" compile --model small --dtype fp32 --program train_step --batch ${bt%:*} --ctx ${bt#*:} --context-length 1024 \
    >"$out/scatter-$bt.fir"
  emit "scatter-${bt/:/x}" "$out/scatter-$bt.fir"
done
for f in tests/lit/codegen/*.fir; do
  n=$(basename "$f" .fir)
  if "$fusec" opt "$f" >/dev/null 2>&1; then
    mkdir -p "$out/lit-$n"
    passes=$(grep -o -- '--passes=[a-z,-]*' "$f" | head -1 || true)
    "$fusec" codegen "$f" $passes --emit cuda --out-dir "$out/lit-$n" >/dev/null 2>&1 || true
    # Also every kernel as printed: a file's functions may name two kernels alike (the files
    # above keep one of them).
    "$fusec" codegen "$f" $passes >"$out/lit-$n/printed.txt" 2>&1 || true
  fi
done
rm -f "$out"/*.fir
(cd "$out" && find . -name '*.cu' -o -name kernels.json -o -name printed.txt | sort | xargs sha256sum) | sha256sum | cut -c1-16
