#!/usr/bin/env bash
# On a GPU machine: the step time of a codegen change, before and after, in one call. Builds
# fusec from commit REV (git archive of this checkout's history into build-gpu-before/src) and
# from the working tree (build-gpu), then runs the bf16 train step of each model and batch of
# SCALE (default "small:64 medium:16", ctx 256, STEPS steps, median of steps 3..) ROUNDS times
# (default 3), before and after alternating, so both see the same GPU state. Prints one line a
# run and the median of each side's medians; logs in $OUT (default build-gpu/out). ATTN=1 also
# times `fusec bench attention` (bf16, fused, ATTN_D x ATTN_SEQ, batch 8) with each build,
# before and after alternating ROUNDS times: for a change to the attention templates.
# PROFILE=1 also writes `fusec profile` of each model and batch of SCALE with each build
# ($OUT/ba-profile-MODEL-bBATCH-SIDE.txt) and prints the kernels whose time changed most.
#   scripts/gpu-before-after.sh dbd7d73
#   ATTN=1 SCALE= scripts/gpu-before-after.sh 0ee5376   # the attention kernels only
set -uo pipefail
cd "$(dirname "$0")/.."
REV=${1:?usage: scripts/gpu-before-after.sh REV}
OUT=${OUT:-$PWD/build-gpu/out}
SCALE=${SCALE-small:64 medium:16}  # empty: no model steps
STEPS=${STEPS:-30}
ROUNDS=${ROUNDS:-3}
mkdir -p "$OUT"
git cat-file -e "$REV^{commit}" 2>/dev/null || { echo "error: commit $REV is not in this checkout's history" >&2; exit 1; }
rm -rf build-gpu-before/src && mkdir -p build-gpu-before/src
git archive "$REV" | tar -x -C build-gpu-before/src
for side in before after; do
  src=. dir=build-gpu
  [[ $side == before ]] && src=build-gpu-before/src dir=build-gpu-before/build
  cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null &&
    cmake --build "$dir" -j"$(nproc)" --target fusec | tail -1 || { echo "error: the $side build failed" >&2; exit 1; }
done
declare -A meds
for mb in $SCALE; do
  m=${mb%:*} b=${mb#*:}
  for ((r = 1; r <= ROUNDS; ++r)); do
    for side in before after; do
      f=build-gpu/fusec
      [[ $side == before ]] && f=build-gpu-before/build/fusec
      log=$OUT/ba-$m-$side-$r.log
      $f run --program train_step --model "$m" --dtype bf16 --random-inputs --batch "$b" --ctx 256 --steps "$STEPS" >"$log" 2>&1
      t=$(grep -o 'median step [0-9.]*' "$log" | awk '{print $3}')
      echo "$m b$b round $r $side: ${t:-failed ($(tail -1 "$log"))} ms"
      meds[$m-$side]+="${t:-} "
    done
  done
  for side in before after; do
    printf '%s b%s %s: median of medians %s ms\n' "$m" "$b" "$side" \
      "$(echo "${meds[$m-$side]}" | tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print NR % 2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')"
  done
done
if [[ ${PROFILE:-0} == 1 ]]; then
  for mb in $SCALE; do
    m=${mb%:*} b=${mb#*:}
    for side in before after; do
      f=build-gpu/fusec
      [[ $side == before ]] && f=build-gpu-before/build/fusec
      $f profile --model "$m" --program train_step --dtype bf16 --batch "$b" >"$OUT/ba-profile-$m-b$b-$side.txt" 2>&1
    done
    echo "$m b$b, train_step kernels by total ms (before -> after), largest changes first:"
    # The train_step section's "By kernel" table: | name | category | launches | total ms | ...
    for side in before after; do
      awk -F'|' '/^## / {t = /^## train_step/} /^### / {k = /^### By kernel/}
        t && k && $4 ~ /^ *[0-9]+ *$/ && $3 !~ /^ *[0-9]/ {gsub(/^ +| +$/, "", $2); gsub(/ /, "", $5); print $2 "\t" $5}' \
        "$OUT/ba-profile-$m-b$b-$side.txt" | sort -u >"$OUT/ba-profile-$m-b$b-$side.tsv"
    done
    join -t $'\t' <(sort "$OUT/ba-profile-$m-b$b-before.tsv") <(sort "$OUT/ba-profile-$m-b$b-after.tsv") |
      awk -F'\t' '{d = $3 - $2; print (d < 0 ? -d : d) "\t" $1 "\t" $2 " -> " $3 " ms"}' | sort -gr | head -8 | cut -f2-
    for side in before after; do  # the train_step section's line is the file's last
      echo "  $side: $(grep -o 'whole step as one CUDA graph: [0-9.]* ms' "$OUT/ba-profile-$m-b$b-$side.txt" | tail -1)"
    done
  done
fi
if [[ ${ATTN:-0} == 1 ]]; then
  for ((r = 1; r <= ROUNDS; ++r)); do
    for side in before after; do
      f=build-gpu/fusec
      [[ $side == before ]] && f=build-gpu-before/build/fusec
      log=$OUT/ba-attention-$side-$r.txt
      $f bench attention --impl fused --dtype bf16 --d "${ATTN_D:-64,128}" --seq "${ATTN_SEQ:-4096,8192,16384}" --batch 8 \
        --warmup 5 --iters 20 >"$log" 2>&1
      echo "attention round $r $side (d, seq, fwd ms, fwd+bwd ms):"
      grep '| fused' "$log" | awk -F'|' '{print "  " $3 $4 $8 $10}'
    done
  done
fi
