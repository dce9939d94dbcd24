#!/usr/bin/env bash
# On a GPU machine with transformers (issue 42): GPT-2 with its default dropout (0.1 on the
# embeddings, the residuals and the attention), trained by fusec and by PyTorch on the same
# token file from the same exported weights, and whether a fusec step is bit-reproducible.
#   1. builds fusec into build-gpu/ (Release);
#   2. a token file of scripts/make_tokens.py's learnable pattern (every window alike, so the
#      runs' different data orders add little noise: what differs between seeds is mostly the
#      dropout masks);
#   3. exports `--hf gpt2` at a small width (CONFIG) with python3 -m fusec.export (train-mode
#      capture: its dropout becomes fusec's dropout ops);
#   4. `fusec run --data` STEPS steps on the batches of --seed 1 with dropout for each
#      --dropout-seed of SEEDS, the first twice (the two runs' losses and --out files must be
#      identical, and another seed's must not), and once with --no-dropout;
#      bench/torch_dropout_curve.py does the same in PyTorch (train mode, PyTorch's RNG seeded
#      with each seed, all on the batches of its --data-seed 1; eval mode without dropout);
#   5. bench/dropout_curve_report.py: the curves, and the verdicts: dropout changes fusec's
#      curve as it changes PyTorch's, within the spread between dropout seeds, and PyTorch's
#      change is larger than that spread (so a fusec that ignored dropout would fail).
# Everything is logged to $OUT/dropout-curve.log; the runs' logs and PyTorch's curves in $OUT/dropout-curve.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=build-gpu
OUT=${OUT:-$PWD/$BUILD/out}
mkdir -p "$OUT"
LOG=$OUT/dropout-curve.log
export PYTHONPATH=$PWD/frontend/python
F=$PWD/$BUILD/fusec
export FUSEC_BIN=$F  # the exporter checks its result with this binary
SEEDS=${SEEDS:-1 2 3 4}
STEPS=${STEPS:-200}
BATCH=${BATCH:-16}
CTX=${CTX:-128}
CONFIG=${CONFIG:-'{"vocab_size": 256, "n_positions": 256, "n_embd": 256, "n_layer": 4, "n_head": 4}'}
ADAMW=(--lr 1e-3 --betas 0.9,0.999 --eps 1e-8 --weight-decay 0.01)
W=$BUILD/dropout-curve
rm -rf "$W" && mkdir -p "$W"

main() {
  local status=0 first=${SEEDS%% *} s specs=()
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$BUILD" -j"$(nproc)" --target fusec | tail -1
  python3 scripts/make_tokens.py --pattern 400000 --vocab 256 --out "$W/text.u16" || return 1
  echo "== export: --hf gpt2 --config $CONFIG"
  python3 -m fusec.export --hf gpt2 --config "$CONFIG" --batch "$BATCH" --seq "$CTX" --out "$W/gpt2" || return 1
  echo "dropout ops in the export: $(grep -c ' = dropout(' "$W/gpt2/model.fir")"
  local run=("$F" run --fir "$W/gpt2/model.fir" --weights "$W/gpt2/weights.safetensors" --program train_step
             --data "$W/text.u16" --batch "$BATCH" --ctx "$CTX" --steps "$STEPS" --device cuda --seed 1 "${ADAMW[@]}")
  for s in $SEEDS; do
    "${run[@]}" --dropout-seed "$s" --out "$W/fusec-$s.safetensors" >"$W/fusec-$s.log" 2>&1 || { tail -3 "$W/fusec-$s.log"; status=1; }
    specs+=(--fusec "1:$W/fusec-$s.log")
  done
  "${run[@]}" --dropout-seed "$first" --out "$W/fusec-$first-again.safetensors" >"$W/fusec-$first-again.log" 2>&1 || status=1
  "${run[@]}" --no-dropout >"$W/fusec-off.log" 2>&1 || status=1
  specs+=(--fusec "0:$W/fusec-off.log")
  echo "== bit-reproducible: dropout seed $first twice"
  if cmp -s "$W/fusec-$first.safetensors" "$W/fusec-$first-again.safetensors" &&
     diff -q <(grep '^step' "$W/fusec-$first.log") <(grep '^step' "$W/fusec-$first-again.log") >/dev/null; then
    echo "identical: every step's loss and the final weights ($(sha256sum <"$W/fusec-$first.safetensors" | cut -c1-16))"
  else
    echo "FAIL: two runs of seed $first differ"; status=1
  fi
  local second=$(echo "$SEEDS" | awk '{print $2}')
  if [[ -n $second ]] && cmp -s "$W/fusec-$first.safetensors" "$W/fusec-$second.safetensors"; then
    echo "FAIL: seeds $first and $second give identical weights (the masks do not depend on the seed)"; status=1
  fi
  echo "== PyTorch: $SEEDS with dropout, once without, on the batches of data seed 1"
  python3 bench/torch_dropout_curve.py --fir "$W/gpt2/model.fir" --data "$W/text.u16" --batch "$BATCH" --ctx "$CTX" \
    --steps "$STEPS" --seeds "${SEEDS// /,}" --no-dropout-seeds 1 --data-seed 1 "${ADAMW[@]}" >"$W/torch.jsonl" || return 1
  echo "== the curves"
  python3 bench/dropout_curve_report.py --torch "$W/torch.jsonl" "${specs[@]}" || status=1
  tar -czf "$OUT/dropout-curve.tgz" -C "$W" $(cd "$W" && ls *.log torch.jsonl 2>/dev/null)  # one file: $OUT takes few
  return $status
}

main 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
