#!/usr/bin/env bash
# On a GPU machine: the model-level attention table of bench/RESULTS.md (issue 12): bf16
# train_step of each model at each context length, batch 4, with --attention fused and naive,
# from `fusec profile --format json` (the attention category's per-launch sum and the step as
# one CUDA graph). Longer contexts than the model's own use --context-length (RoPE has no
# learned positions). Writes $OUT/attention-models.md (and the raw JSON beside it).
# FUSEC_BUILD (default build-gpu) must hold a Release fusec; MODELS and CTXS override the grid.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${FUSEC_BUILD:-build-gpu}
OUT=${OUT:-$PWD/$BUILD/out}
mkdir -p "$OUT"
for model in ${MODELS:-small medium}; do
  for ctx in ${CTXS:-256 1024 4096}; do
    for lowering in fused naive; do
      f="$OUT/attn-$model-$ctx-$lowering.json"
      if ! "$BUILD/fusec" profile --model "$model" --program train_step --dtype bf16 --batch 4 --ctx "$ctx" \
        --context-length "$((ctx > 1024 ? ctx : 1024))" --attention "$lowering" --format json >"$f" 2>"$f.err"; then
        echo "{\"error\": \"$(tail -1 "$f.err" | tr -d '"\\')\"}" >"$f"
      fi
    done
  done
done
python3 - "$OUT" ${MODELS:-small medium} -- ${CTXS:-256 1024 4096} >"$OUT/attention-models.md" <<'PY'
import json, sys
out = sys.argv[1]
sep = sys.argv.index("--")
models, ctxs = sys.argv[2:sep], sys.argv[sep + 1:]

def read(model, ctx, lowering):
    j = json.load(open(f"{out}/attn-{model}-{ctx}-{lowering}.json"))
    if "error" in j:
        return None, None, j["error"]
    p = next(p for p in j["programs"] if p["program"] == "train_step")
    att = sum(c["ms"] for c in p["categories"] if c["name"] == "attention")
    return att, p["graph_ms"] or p["launch_sum_ms"], None

print("| model | ctx | fused: attention ms | fused: step ms | naive: attention ms | naive: step ms | attention speedup | step speedup |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for m in models:
    for c in ctxs:
        fa, fs, fe = read(m, c, "fused")
        na, ns, ne = read(m, c, "naive")
        cell = lambda v, e: f"{v:.3f}" if v is not None else ("OOM" if e and "out of memory" in e.lower() else "error")
        sp = lambda a, b: f"{a / b:.2f}x" if a and b else "-"
        print(f"| {m} | {c} | {cell(fa, fe)} | {cell(fs, fe)} | {cell(na, ne)} | {cell(ns, ne)} | {sp(na, fa)} | {sp(ns, fs)} |")
PY
cat "$OUT/attention-models.md"
