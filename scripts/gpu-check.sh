#!/usr/bin/env bash
# On a GPU machine: configure (Release, LibTorch found through python3's torch), build with
# every core into build-gpu/ (git-ignored, inside the repo), run the GPU tests
# (`ctest -L gpu`) and the LibTorch comparisons (`ctest -L eager`; FUSEC_SKIP_EAGER=1 skips
# them), the `fusec device` entry point and nvidia-smi; everything is logged to
# $OUT/gpu-check.log ($OUT defaults to build-gpu/out).
#
# Running it through the session's device tool: that tool sends /work/main's checkout, not a
# helper's worktree. The simplest working way is to export the branch into a folder of
# /work/main that git ignores and carry it:
#   grep -qx '/.gpu-src/' /work/main/.git/info/exclude || echo /.gpu-src/ >> /work/main/.git/info/exclude
#   rm -rf /work/main/.gpu-src && mkdir /work/main/.gpu-src
#   git -C /work/wt/BRANCH archive HEAD | tar -x -C /work/main/.gpu-src
# then run with carry [".gpu-src"] and the command `cd .gpu-src && scripts/gpu-check.sh`.
# (On /work/main itself, after a merge, just run `scripts/gpu-check.sh`.)
#
# FUSEC_SKIP_GPU_TESTS=1 skips `ctest -L gpu`; FUSEC_EAGER_TESTS (a ctest -R regex) picks some of
# the LibTorch comparisons (the whole label takes over 10 minutes: a device call's limit).
# FUSEC_GPU_TARGETS (optional) limits the build to some targets, e.g.
# "fusec fusec_gpu_tests", to save device time; the default builds everything.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-gpu
OUT=${OUT:-$PWD/$BUILD/out}
mkdir -p "$OUT"
LOG=$OUT/gpu-check.log

run() {
  echo "== $*"
  "$@"
}

main() {
  local torch_prefix targets=()
  torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
  run nvidia-smi
  run cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix"
  if [[ -n ${FUSEC_GPU_TARGETS:-} ]]; then
    read -ra targets <<<"$FUSEC_GPU_TARGETS"
    targets=(--target "${targets[@]}")
  fi
  run cmake --build "$BUILD" -j"$(nproc)" "${targets[@]}"
  run "$BUILD/fusec" device
  # GPU tests share the one GPU; their CPU-side references (the interpreter) are what take
  # time, so they run in parallel (those that time things are RUN_SERIAL). Then the LibTorch
  # comparisons (label eager: every model size against eager PyTorch, the seed grid), serial.
  local status=0
  if [[ ${FUSEC_SKIP_GPU_TESTS:-0} != 1 ]]; then
    (cd "$BUILD" && run ctest -L gpu --output-on-failure -V -j"${FUSEC_CTEST_JOBS:-8}") || status=1
  fi
  if [[ ${FUSEC_SKIP_EAGER:-0} != 1 ]]; then
    (cd "$BUILD" && run ctest -L eager -R "${FUSEC_EAGER_TESTS:-.}" --output-on-failure -V) || status=1
  fi
  end_to_end || status=1
  return $status
}

# The CLI on the device: compile time of medium train_step with an empty and a warm kernel
# cache, and `fusec run --device cuda` with and without the CUDA graph.
end_to_end() {
  local fusec=$PWD/$BUILD/fusec tmp
  tmp=$(mktemp -d)
  echo "== compile time, medium train_step, cold cache then warm"
  for pass in cold warm; do
    /usr/bin/time -f "$pass: %e s wall, %M KB max RSS" env XDG_CACHE_HOME="$tmp/cache" "$fusec" compile --model medium \
      --program train_step --batch 4 --ctx 256 --emit=cubin --out-dir "$tmp/cubin-$pass" || return 1
  done
  run "$fusec" run --init-weights "$tmp/w.safetensors" --model small --seed 3
  python3 - "$tmp/in.safetensors" <<'PY'
import json, random, struct, sys
random.seed(1)
ids = [random.randrange(10000) for _ in range(4 * 256)]
tg = [random.randrange(10000) for _ in range(4 * 256)]
hdr = {"ids": {"dtype": "I64", "shape": [4, 256], "data_offsets": [0, 8192]},
       "targets": {"dtype": "I64", "shape": [4, 256], "data_offsets": [8192, 16384]}}
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + struct.pack("<2048q", *ids, *tg))
PY
  for graph in "" --no-cuda-graph; do
    /usr/bin/time -f "run small train_step x5 $graph: %e s wall" "$fusec" run --device cuda --program train_step \
      --model small --steps 5 --weights "$tmp/w.safetensors" --inputs "$tmp/in.safetensors" $graph \
      --out "$tmp/out$graph.safetensors" || return 1
  done
  cmp "$tmp/out.safetensors" "$tmp/out--no-cuda-graph.safetensors" && echo "graph and direct runs: identical outputs"
  # Whole steps under compute-sanitizer: tiny forward and train_step (graph replays included).
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  run "$fusec" run --init-weights "$tmp/tw.safetensors" --model tiny --seed 3
  python3 "$PWD/tests/lit/run/inputs/st.py" write "$tmp/tin.safetensors" 'ids=I64[2,5]:1,2,3,4,5,36,7,0,9,10' \
    'targets=I64[2,5]:2,3,4,5,6,0,1,1,35,36'
  for program in forward train_step; do
    for dtype in fp32 bf16; do
      run "$sanitizer" --tool memcheck --error-exitcode 3 "$fusec" run --device cuda --program $program --model tiny \
        --dtype $dtype --weights "$tmp/tw.safetensors" --inputs "$tmp/tin.safetensors" --out "$tmp/t.safetensors" \
        $([[ $program == train_step ]] && echo --steps 3) || return 1
    done
  done
  # fusec links no LibTorch, cuBLASLt or NVRTC (it opens the CUDA ones at first use): it starts
  # in milliseconds. The eager rows of bench come from the fusec-eager worker.
  for i in 1 2 3; do /usr/bin/time -f "fusec --version: %e s wall, %M KB max RSS" "$fusec" --version; done
  if [[ -x $PWD/$BUILD/fusec-eager ]]; then
    run "$fusec" bench --model small --batch 4 --ctx 256 --dtype bf16 --passes forward,step --warmup 2 --iters 5 || return 1
    run "$fusec" bench attention --d 64 --seq 1024 --impl eager,fused --warmup 2 --iters 5 || return 1
  fi
  rm -rf "$tmp"
}

set -o pipefail
main 2>&1 | tee "$LOG"
