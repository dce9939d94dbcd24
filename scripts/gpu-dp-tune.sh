#!/usr/bin/env bash
# On a 2-GPU host: what the data-parallel step's extra time is made of, for one model and
# batch (default medium 16): two independent 1-GPU runs at once (the host's compute alone,
# both GPUs busy), then --gpus 2 with NCCL's defaults, with fewer NCCL channels (its kernels
# take fewer SMs from the backward's) and with other bucket sizes. Logs to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BUILD=build-gpu
OUT=${OUT:-$PWD/$BUILD/out}
mkdir -p "$OUT"
F=$BUILD/fusec
MODELS=${MODELS:-medium:16 small:64}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$BUILD" -j"$(nproc)" --target fusec | tail -1
step() { grep -o 'median step [0-9.]* ms' "$1" || tail -2 "$1"; }
for mb in $MODELS; do
  m=${mb%:*} b=${mb#*:}
  args=(--program train_step --model "$m" --dtype bf16 --random-inputs --batch "$b" --ctx 256 --steps 40)
  CUDA_VISIBLE_DEVICES=0 $F run "${args[@]}" >"$OUT/t-$m-solo0.log" 2>&1 &
  CUDA_VISIBLE_DEVICES=1 $F run "${args[@]}" >"$OUT/t-$m-solo1.log" 2>&1
  wait
  echo "$m b$b two 1-GPU runs at once: $(step "$OUT/t-$m-solo0.log") / $(step "$OUT/t-$m-solo1.log")"
  $F run --gpus 2 "${args[@]}" >"$OUT/t-$m-dp.log" 2>&1; echo "$m --gpus 2 defaults: $(step "$OUT/t-$m-dp.log")"
  for c in 2 4 8; do
    NCCL_MAX_NCHANNELS=$c NCCL_MIN_NCHANNELS=1 $F run --gpus 2 "${args[@]}" >"$OUT/t-$m-ch$c.log" 2>&1
    echo "$m --gpus 2 NCCL_MAX_NCHANNELS=$c: $(step "$OUT/t-$m-ch$c.log")"
  done
  for mbk in 5 100; do
    $F run --gpus 2 --bucket-mb $mbk "${args[@]}" >"$OUT/t-$m-b$mbk.log" 2>&1
    echo "$m --gpus 2 --bucket-mb $mbk: $(step "$OUT/t-$m-b$mbk.log")"
  done
done
