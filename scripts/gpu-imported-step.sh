#!/usr/bin/env bash
# On a GPU machine (torch with CUDA): one imported model, quickly: builds fusec into
# build-gpu/, checks the model against CUDA eager (tests/python/export_test.py --device cuda
# --only MODEL: fp32 and bf16 forward, gradients, three AdamW steps), exports it at GPT-2 small
# size (batch 8, seq 1024), then `fusec bench --vs-torch` (eager, torch.compile default and
# reduce-overhead, fusec, one process) and `fusec profile` (by category and kernel).
# Logs in $OUT: check.txt, bench.txt, profile.txt.   MODEL=gpt2|llama|cs336 (default gpt2);
# STEP_ENVS: target switches to time the step under too (below); CHECK=0 skips the check.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=build-gpu
OUT=${OUT:-$PWD/$BUILD/out}
MODEL=${MODEL:-gpt2}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/frontend/python
source scripts/export-models.sh  # SPEC and KWARGS
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.txt" 2>&1
cmake --build "$BUILD" -j"$(nproc)" --target fusec >"$OUT/build.txt" 2>&1 || { tail -30 "$OUT/build.txt"; exit 1; }
if [[ ${CHECK:-1} == 1 ]]; then  # CHECK=0: no check against eager (timings only)
  echo "== export_test.py --device cuda --only $MODEL"
  timeout 240 python3 tests/python/export_test.py --fusec "$BUILD/fusec" --device cuda --only "$MODEL" >"$OUT/check.txt" 2>&1
  echo "rc=$?"; grep -E "^(ok|FAIL)" "$OUT/check.txt" | grep -E "FAIL|logits|three AdamW|every"
fi
dir=$OUT/$MODEL
timeout 180 python3 -m fusec.export --model "${SPEC[$MODEL]}" --kwargs "${KWARGS[$MODEL]}" --batch 8 --seq 1024 --out "$dir" \
  --no-verify 2>&1 | grep -v Warning | tail -1
echo "== fusec bench --fir $MODEL --vs-torch"
timeout 300 "$BUILD/fusec" bench --fir "$dir/model.fir" --dtype bf16 --passes step --vs-torch --warmup 5 --iters 10 \
  >"$OUT/bench.txt" 2>&1
grep -E "median" "$OUT/bench.txt"
# STEP_ENVS (space-separated VAR=VALUE, e.g. "FUSEC_ROW_SHARED=1 FUSEC_WGMMA_FUSED_DQ=1"): the
# fusec step again under each switch, then under all of them, beside the default (same model).
if [[ -n ${STEP_ENVS:-} ]]; then
  read -ra envs <<<"$STEP_ENVS"
  for e in "${envs[@]}" "${envs[*]}"; do
    read -ra set <<<"$e"
    echo "== fusec bench --fir $MODEL under ${set[*]}"
    env "${set[@]}" timeout 120 "$BUILD/fusec" bench --fir "$dir/model.fir" --dtype bf16 --passes step --warmup 5 --iters 10 \
      >"$OUT/bench-env.txt" 2>&1
    grep -E "median" "$OUT/bench-env.txt" | tail -1
  done
fi
# PROFILE_ENV (VAR=VALUE ...): the profile under those switches instead of the defaults.
read -ra profile_env <<<"${PROFILE_ENV:-}"
echo "== fusec profile --fir $MODEL ${PROFILE_ENV:-}"
env "${profile_env[@]}" timeout 120 "$BUILD/fusec" profile --fir "$dir/model.fir" --dtype bf16 --iters 10 >"$OUT/profile.txt" 2>&1
sed -n '/## train_step/,/Top 10/p' "$OUT/profile.txt" | grep -E "^\| (gemm|pointwise|row_reduce|col_reduce|attention|optimizer) |col_reduce_|row_reduce_|multi_tensor"
grep -E "whole step" "$OUT/profile.txt"
rm -f "$dir/weights.safetensors"
