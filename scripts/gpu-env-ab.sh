#!/usr/bin/env bash
# On a GPU machine: the step time under two or more settings of environment switches, with the
# same build, in one call. Builds fusec into build-gpu, then runs the bf16 train step of each model
# and batch of SCALE (default "small:64 medium:16", ctx 256, STEPS steps, median of steps 3..)
# ROUNDS times (default 3), the settings alternating so all see the same GPU state.
# Prints one line a run and the median of each setting's medians; logs in $OUT (default
# build-gpu/out). PROFILE=1 also writes `fusec profile` of each model and batch under each
# setting ($OUT/env-profile-MODEL-bBATCH-SETTING.txt) and their categories and attention and
# optimizer kernels, once each, to $OUT/profiles.txt. RUN_LIMIT (default 180) bounds each run.
#   scripts/gpu-env-ab.sh FUSEC_DEPENDENT_LAUNCH=0 FUSEC_DEPENDENT_LAUNCH=1
#   scripts/gpu-env-ab.sh FUSEC_SIDE_STREAM=0 FUSEC_WGMMA=0 FUSEC_WGMMA_PRODUCER=0   (the first at its default: the baseline)
# A setting FUSEC_BIN=PATH runs the fusec at PATH instead of build-gpu/fusec: two builds A/B'd
# (a baseline carried beside .prebuilt, say).
#   scripts/gpu-env-ab.sh FUSEC_BIN=build-prev/fusec FUSEC_BIN=build-gpu/fusec
set -uo pipefail
cd "$(dirname "$0")/.."
(($# >= 2)) || { echo "usage: scripts/gpu-env-ab.sh NAME=VALUE NAME=VALUE [NAME=VALUE...]" >&2; exit 1; }
settings=("$@")
for s in "${settings[@]}"; do
  [[ $s =~ ^[A-Z_][A-Z0-9_]*=[^[:space:]]*$ ]] || { echo "error: '$s' is not NAME=VALUE" >&2; exit 1; }
done
OUT=${OUT:-$PWD/build-gpu/out}
SCALE=${SCALE-small:64 medium:16}
STEPS=${STEPS:-30}
ROUNDS=${ROUNDS:-3}
mkdir -p "$OUT"
rm -f "$OUT/profiles.txt"
# NO_BUILD=1: build-gpu/fusec is already there (a binary carried to the device, say).
if [[ ${NO_BUILD:-0} != 1 ]]; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null &&
    cmake --build build-gpu -j"$(nproc)" --target fusec | tail -1 || { echo "error: the build failed" >&2; exit 1; }
fi
declare -A meds
tag() { local t=${1//=/-}; echo "${t//\//_}"; }  # SETTING: a file name's part
bin() { [[ $1 == FUSEC_BIN=* ]] && echo "${1#FUSEC_BIN=}" || echo build-gpu/fusec; }  # SETTING: its fusec
for s in "${settings[@]}"; do
  [[ -x $(bin "$s") ]] || { echo "error: no fusec at '$(bin "$s")'" >&2; exit 1; }
done
for mb in $SCALE; do
  m=${mb%:*} b=${mb#*:}
  for ((r = 1; r <= ROUNDS; ++r)); do
    for s in "${settings[@]}"; do
      log=$OUT/env-$m-b$b-$(tag "$s")-$r.log
      # RUN_LIMIT seconds a run (default 180): a setting whose kernels hang costs that much, not
      # the rest of the call (a forward variant once did).
      timeout "${RUN_LIMIT:-180}" env "$s" "$(bin "$s")" run --program train_step --model "$m" --dtype bf16 --random-inputs \
        --batch "$b" --ctx 256 --steps "$STEPS" >"$log" 2>&1
      rc=$?
      ((rc == 124)) && echo "timed out after ${RUN_LIMIT:-180} s" >>"$log"
      t=$(grep -o 'median step [0-9.]*' "$log" | awk '{print $3}')
      echo "$m b$b round $r $s: ${t:-failed ($(tail -1 "$log"))} ms"
      meds[$m-$s]+="${t:-} "
    done
  done
  for s in "${settings[@]}"; do
    printf '%s b%s %s: median of medians %s ms\n' "$m" "$b" "$s" \
      "$(echo "${meds[$m-$s]}" | tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print NR % 2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')"
  done
  if [[ ${PROFILE:-0} == 1 ]]; then
    for s in "${settings[@]}"; do
      f=$OUT/env-profile-$m-b$b-$(tag "$s").txt
      timeout "${RUN_LIMIT:-180}" env "$s" "$(bin "$s")" profile --model "$m" --program train_step --dtype bf16 --batch "$b" >"$f" 2>&1
      echo "$m b$b $s: $(grep -o 'whole step as one CUDA graph: [0-9.]* ms (between kernels: [0-9.-]* ms)' "$f" | tail -1)"
    done
  fi
done
if [[ ${PROFILE:-0} == 1 ]]; then
  for f in "$OUT"/env-profile-*.txt; do
    [[ -e $f ]] || continue
    echo "== $(basename "$f")"
    sed -n '/## train_step/,$p' "$f" | grep -E "^\| (gemm|pointwise|row_reduce|attention|optimizer|comm) +\| [0-9]|^\| (attention|multi_tensor|pointwise_\*_adamw)" |
      awk -F'|' '{k = $2; gsub(/ /, "", k)} !seen[k]++' | cut -c1-110
  done >"$OUT/profiles.txt"
fi
