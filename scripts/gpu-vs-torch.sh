#!/usr/bin/env bash
# On a GPU machine: issue 41's step ratios in one device call, fusec's compiled bf16 train step
# against torch.compile(mode="reduce-overhead") (bench/torch_compile_ref.py, SDPA attention),
# ctx 256, for each model:batch of SCALE (default "small:64 medium:4 medium:16"): fusec's rows
# first (`fusec bench`), then torch's reduce-overhead rows only (its default mode compiles for
# about a minute more a model and is not the bar), each model's rows in one process, then a table
# of the ratios. FUSEC names the binary (default build-gpu/fusec, else .prebuilt/fusec, which
# scripts/prebuild-for-device makes here and the device tool carries). Logs in $OUT (default
# build-gpu/out); the table last on stdout and in $OUT/vs-torch.txt.
#   SCALE="small:64" scripts/gpu-vs-torch.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/build-gpu/out}
mkdir -p "$OUT"
F=${FUSEC:-}
if [[ -z $F ]]; then
  if [[ -x build-gpu/fusec ]]; then F=build-gpu/fusec; else F=.prebuilt/fusec; fi
fi
[[ -x $F ]] || { echo "error: no fusec at '$F' (build it, or scripts/prebuild-for-device here and carry .prebuilt)" >&2; exit 1; }
[[ $F == .prebuilt/* ]] && export LD_LIBRARY_PATH=$PWD/.prebuilt:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
SCALE=${SCALE:-small:64 medium:4 medium:16}
declare -A batches
models=()
for mb in $SCALE; do
  m=${mb%:*} b=${mb#*:}
  [[ -n ${batches[$m]:-} ]] || models+=("$m")
  batches[$m]+="${batches[$m]:+,}$b"
done
common=(--ctx 256 --dtype bf16 --passes step --warmup 5 --iters 10)
for m in "${models[@]}"; do
  "$F" bench --model "$m" --batch "${batches[$m]}" "${common[@]}" --impl compiled --format json \
    >"$OUT/vs-torch-fusec-$m.jsonl" 2>"$OUT/vs-torch-fusec-$m.err" || echo "error: fusec bench $m failed ($(tail -1 "$OUT/vs-torch-fusec-$m.err"))"
  python3 bench/torch_compile_ref.py --model "$m" --batch "${batches[$m]}" "${common[@]}" --impl torch.compile-ro \
    --fusec "$F" >"$OUT/vs-torch-ro-$m.jsonl" 2>"$OUT/vs-torch-ro-$m.err" || echo "error: torch_compile_ref.py $m failed ($(tail -1 "$OUT/vs-torch-ro-$m.err"))"
done
# One line a model and batch: both medians and their ratio.
python3 - "$OUT" "${models[@]}" <<'EOF' | tee "$OUT/vs-torch.txt"
import json, sys, os
out, models = sys.argv[1], sys.argv[2:]
def rows(path):
    if not os.path.exists(path):
        return {}
    r = {}
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            j = json.loads(line)
            if j.get("status") == "OK":
                r[j["batch"]] = j["median_ms"]
    return r
print(f"{'model':8} {'batch':>5} {'fusec ms':>10} {'reduce-overhead ms':>19} {'ratio':>7}")
for m in models:
    f, t = rows(f"{out}/vs-torch-fusec-{m}.jsonl"), rows(f"{out}/vs-torch-ro-{m}.jsonl")
    for b in sorted(set(f) | set(t)):
        ratio = f"{f[b] / t[b]:.3f}x" if b in f and b in t else "-"
        print(f"{m:8} {b:>5} {f.get(b, float('nan')):>10.3f} {t.get(b, float('nan')):>19.3f} {ratio:>7}")
EOF
OUT=$OUT scripts/pack-out.sh >&2  # over 8 files (the device tool's limit): the logs into one archive
