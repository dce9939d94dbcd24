#!/usr/bin/env bash
# On a GPU machine: configure (Release, LibTorch found through python3's torch), build with
# every core into build-gpu/ (git-ignored, inside the repo), run the GPU tests
# (`ctest -L gpu`), the `fusec device` entry point and nvidia-smi; everything is logged to
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
  (cd "$BUILD" && run ctest -L gpu --output-on-failure -V)
}

set -o pipefail
main 2>&1 | tee "$LOG"
