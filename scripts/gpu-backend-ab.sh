#!/usr/bin/env bash
# On a GPU machine with torch >= 2: the torch.compile backend's Python before and after a
# change, in one call. Builds fusec and libfusec_c.so from the working tree (the C side is
# the same for both), extracts bench/ and frontend/ at commit REV into build-gpu-before/py,
# then runs bench/torch_backend_bench.py with BENCH_ARGS from each tree, ROUNDS times (default
# 2), before and after alternating; AFTER_ARGS are added to the after side only (e.g.
# "--host-profile 5 --profile"). Tables on stdout, each run's stderr in $OUT/ab-SIDE-R.err.
#   BENCH_ARGS="--model medium --batch 16 --impl fusec" scripts/gpu-backend-ab.sh 34743ad
set -uo pipefail
cd "$(dirname "$0")/.."
REV=${1:?usage: scripts/gpu-backend-ab.sh REV}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BUILD=build-gpu
OUT=${OUT:-$PWD/$BUILD/out}
mkdir -p "$OUT"
git cat-file -e "$REV^{commit}" 2>/dev/null || { echo "error: commit $REV is not in this checkout's history" >&2; exit 1; }
rm -rf build-gpu-before/py && mkdir -p build-gpu-before/py
git archive "$REV" bench frontend | tar -x -C build-gpu-before/py
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null &&
  cmake --build "$BUILD" -j"$(nproc)" --target fusec fusec_c | tail -1 || { echo "error: the build failed" >&2; exit 1; }
export FUSEC_LIB=$PWD/$BUILD/libfusec_c.so FUSEC=$PWD/$BUILD/fusec
for ((r = 1; r <= ${ROUNDS:-2}; ++r)); do
  for side in before after; do
    root=. extra=${AFTER_ARGS:-}
    [[ $side == before ]] && root=build-gpu-before/py extra=
    echo "== $side ($([[ $side == before ]] && echo "$REV" || echo "working tree")), round $r"
    timeout 420 python3 "$root/bench/torch_backend_bench.py" --fusec "$FUSEC" ${BENCH_ARGS:-} $extra 2>"$OUT/ab-$side-$r.err"
    grep '"fusec_graphs"' "$OUT/ab-$side-$r.err" | python3 -c 'import json,sys
for line in sys.stdin:
    r = json.loads(line)
    for g in r.get("fusec_graphs", []): print("  ", r["impl"], g)' 2>/dev/null
    tail -2 "$OUT/ab-$side-$r.err" | grep -v '^{' || true
  done
done
