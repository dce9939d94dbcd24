#!/usr/bin/env bash
# On a GPU machine (torch with CUDA): the bring-your-own-model checks and table.
#   1. builds fusec into build-gpu/ (as scripts/gpu-check.sh configures it);
#   2. tests/python/export_test.py --device cuda: the three test models exported with
#      torch.export, trained on the GPU in fp32 and bf16 against CUDA eager;
#   3. for each model named in $FUSEC_EXPORT_MODELS (default: gpt2 llama cs336), at GPT-2
#      small size (d 768, 12 layers, ctx 1024, batch 8): export, then `fusec bench --fir
#      --dtype bf16 --passes step --vs-torch` (eager PyTorch, torch.compile default and
#      reduce-overhead, fusec), the table to the log.
# Everything is logged to $OUT/gpu-export-bench.log. FUSEC_SKIP_EXPORT_TEST=1 skips step 2;
# FUSEC_EXPORT_PROFILE=1 adds each model's `fusec profile` (bf16 train_step, by category and
# kernel) to $OUT/profile-MODEL.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-gpu
OUT=${OUT:-$PWD/$BUILD/out}
mkdir -p "$OUT"
LOG=$OUT/gpu-export-bench.log
export PYTHONPATH=$PWD/frontend/python

source scripts/export-models.sh  # SPEC and KWARGS

main() {
  local status=0 torch_prefix
  torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix" >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" --target fusec
  if [[ ${FUSEC_SKIP_EXPORT_TEST:-0} != 1 ]]; then
    echo "== export_test.py --device cuda"
    python3 tests/python/export_test.py --fusec "$BUILD/fusec" --device cuda 2>&1 | grep -v FutureWarning || status=1
  fi
  for m in ${FUSEC_EXPORT_MODELS:-gpt2 llama cs336}; do
    local dir=$OUT/$m
    echo "== export $m (GPT-2 small size, batch 8, seq 1024)"
    # --no-verify: the export's own check runs fusec's CPU interpreter, far too slow at this
    # shape (step 2 checks these models' exports against PyTorch on the GPU).
    ( time python3 -m fusec.export --model "${SPEC[$m]}" --kwargs "${KWARGS[$m]}" --batch 8 --seq 1024 --out "$dir" \
        --no-verify ) \
      2>&1 | grep -v Warning || { status=1; continue; }
    echo "== fusec compile --fir $m train_step --time-passes (bf16)"
    "$BUILD/fusec" compile --fir "$dir/model.fir" --program train_step --dtype bf16 --time-passes >/dev/null || status=1
    echo "== fusec bench --fir $m --dtype bf16 --passes step --vs-torch"
    "$BUILD/fusec" bench --fir "$dir/model.fir" --dtype bf16 --passes step --vs-torch --warmup 5 --iters 10 || status=1
    if [[ ${FUSEC_EXPORT_PROFILE:-0} == 1 ]]; then
      "$BUILD/fusec" profile --fir "$dir/model.fir" --dtype bf16 --iters 10 >"$OUT/profile-$m.txt" 2>&1 || status=1
      echo "== fusec profile --fir $m: $OUT/profile-$m.txt"
      head -30 "$OUT/profile-$m.txt"
    fi
    rm -f "$dir/weights.safetensors"  # large, and rebuilt by the export
  done
  return $status
}

main 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
