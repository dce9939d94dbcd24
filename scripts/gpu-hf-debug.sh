#!/usr/bin/env bash
# On a GPU machine with transformers: for the Hugging Face families in FAMILIES (default
# "qwen3 olmo2"), export them as the corpus does (tests/python/hf_corpus_test.py --keep), then run
# each export's forward with fusec on the CPU interpreter (what the export's own check compared
# with PyTorch), on the GPU with fused attention and with naive attention, and print the
# relative difference of each GPU run's logits to the CPU's. The exports (model.fir, weights,
# inputs) come back in $OUT/exports.tgz for debugging on a machine without a GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BUILD=build-gpu
OUT=${OUT:-$PWD/$BUILD/out}
FAMILIES=${FAMILIES:-qwen3 olmo2}
F=$BUILD/fusec
mkdir -p "$OUT"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$BUILD" -j"$(nproc)" --target fusec | tail -1
K=$OUT/keep
python3 tests/python/hf_corpus_test.py --device cuda --fusec "$F" --families "${FAMILIES// /,}" --keep "$K" >"$OUT/corpus.log" 2>&1
for fam in $FAMILIES; do
  d=$K/$fam
  [[ -f $d/export/model.fir ]] || { echo "$fam: no export"; continue; }
  run() { $F run --fir "$d/export/model.fir" --weights "$d/export/weights.safetensors" --inputs "$d/inputs.safetensors" --program forward "$@"; }
  run --device cpu --out "$d/cpu.safetensors" >/dev/null 2>"$d/cpu.err" || tail -2 "$d/cpu.err"
  for att in fused naive; do
    run --device cuda --attention $att --out "$d/$att.safetensors" >/dev/null 2>"$d/$att.err" || tail -2 "$d/$att.err"
  done
  $F compile --fir "$d/export/model.fir" --program forward -o "$d/forward.compiled.fir" 2>/dev/null
  python3 - "$d" "$fam" <<'PY'
import sys, torch
from safetensors.torch import load_file
d, fam = sys.argv[1], sys.argv[2]
cpu = load_file(f"{d}/cpu.safetensors")["logits"].double()
for att in ("fused", "naive"):
    try:
        x = load_file(f"{d}/{att}.safetensors")["logits"].double()
        print(f"{fam}: cuda {att} vs cpu interpreter: {((x - cpu).norm() / cpu.norm()).item():.3e}")
    except Exception as e:
        print(f"{fam}: cuda {att}: {e}")
PY
done
cd "$OUT" && tar czf exports.tgz --exclude='*.steps.safetensors' --exclude='grads.safetensors' keep && rm -rf keep
