#!/usr/bin/env bash
# On a GPU machine: the comparisons against LibTorch CUDA eager (label `eager`: every model
# size, fp32 and bf16, the 100-step loss curve, the attention seed grid). They hold tens of
# GB each and run one at a time; the whole set takes longer than one device call, so pass a
# ctest regex to run a part, e.g.
#   scripts/gpu-eager.sh 'small_|medium_|Curve'
#   scripts/gpu-eager.sh 'xl_|2_7B_'
#   scripts/gpu-eager.sh AttentionSeedGrid
# Logs go to $OUT/gpu-eager.log ($OUT defaults to build-gpu/out). Same build folder and
# configuration as scripts/gpu-check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-gpu
OUT=${OUT:-$PWD/$BUILD/out}
mkdir -p "$OUT"
regex=${1:-.}
main() {
  local torch_prefix
  torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix" >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" --target fusec fusec_torch_gpu_tests | tail -1
  cd "$BUILD" && ctest -L eager -R "$regex" --output-on-failure -V
}
main 2>&1 | tee "$OUT/gpu-eager.log"
