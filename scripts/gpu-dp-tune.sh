#!/usr/bin/env bash
# On a host with 2 or more GPUs: what the data-parallel step's extra time is made of. For each
# model and per-GPU batch (MODELS, default "small:64 medium:16"), the 1-GPU step, then on 2, 4 ..
# GPUs the step under each variant of VARIANTS: "name:VAR=value,VAR=value" (the variables
# set for that run; "name:" for none), e.g. the SMs the collectives get (FUSEC_COMM_SMS, which
# the GEMMs beside them leave free), graph node priorities (FUSEC_GRAPH_NODE_PRIORITY=0 is the
# old behaviour), NCCL's own variables, or FUSEC_TUNE_FLAGS (extra fusec flags, '+' for spaces).
# One line a run in $OUT/tune.txt (and on stdout), with the last step's overlap of compute and
# collectives (fusec run --timeline); every run's log and timeline (tl-*.json) in $OUT.
set -uo pipefail
# Stopped from outside (a `timeout` around this script): stop the run in flight too, or its
# ranks go on holding the GPUs and slow whatever the same call runs next (a bench after an
# interrupted tune once measured every step at twice its time).
trap 'pkill -TERM -P $$; exit 143' TERM INT
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BUILD=build-gpu
OUT=${OUT:-$PWD/$BUILD/out}
mkdir -p "$OUT"
F=$BUILD/fusec
MODELS=${MODELS:-small:64 medium:16}
VARIANTS=${VARIANTS:-default:}
STEPS=${STEPS:-30}
GPUS=$(nvidia-smi -L | wc -l)
COUNTS=${COUNTS:-$(n=2; while (( n <= GPUS )); do echo $n; n=$((n * 2)); done)}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$BUILD" -j"$(nproc)" --target fusec | tail -1
step() { { grep -o 'median step [0-9.]* ms' "$1" && grep -o 'compute .*of the step)' "$1"; } | tr '\n' ' ' || tail -1 "$1"; }
say() { echo "$*" | tee -a "$OUT/tune.txt"; }
for mb in $MODELS; do
  m=${mb%:*} b=${mb#*:}
  args=(--program train_step --model "$m" --dtype bf16 --random-inputs --batch "$b" --ctx 256 --steps "$STEPS")
  timeout 300 $F run "${args[@]}" --timeline "$OUT/tl-$m-1.json" >"$OUT/t-$m-1.log" 2>&1
  say "$m b$b 1 GPU: $(step "$OUT/t-$m-1.log")"
  for n in $COUNTS; do
    for v in $VARIANTS; do
      name=${v%%:*} vars=${v#*:} envs=() extra=()
      IFS=, read -ra envs <<<"$vars"
      for e in "${envs[@]}"; do [[ $e == FUSEC_TUNE_FLAGS=* ]] && IFS=+ read -ra extra <<<"${e#FUSEC_TUNE_FLAGS=}"; done
      log=$OUT/t-$m-$n-$name.log
      env "${envs[@]}" timeout 300 $F run --gpus "$n" "${extra[@]}" "${args[@]}" --timeline "$OUT/tl-$m-$n-$name.json" >"$log" 2>&1
      say "$m b$b $n GPUs $name: $(step "$log")"
    done
  done
done
