#!/usr/bin/env bash
# On a GPU machine with torch >= 2 (and transformers for --hf): builds fusec and libfusec_c.so,
# then the torch.compile backend's test (tests/python/backend_test.py --device cuda: the CS336
# LM, a graph break, nanoGPT, transformers' GPT-2 and Llama, fp32 and bf16 autocast, 20 AdamW
# steps against eager; an unmapped op and strict=True) and, unless PARTS leaves it out, the
# step-time and first-call comparison with Inductor (bench/torch_backend_bench.py). Logs to $OUT.
#   PARTS="test bench" (default both; "debug": scripts/gpu-backend-debug.py; "gtest": the
#   C interface's and the Executable's GPU tests), BENCH_ARGS (e.g. "--model small --batch 64"), TEST_ARGS.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BUILD=build-gpu
OUT=${OUT:-$PWD/$BUILD/out}
PARTS=${PARTS:-test bench}
mkdir -p "$OUT"
# Configured as gpu-check.sh and gpu-sanitize.sh configure build-gpu/ (LibTorch found), so one
# device call after another reuses the build instead of reconfiguring it.
torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release ${torch_prefix:+-DCMAKE_PREFIX_PATH="$torch_prefix"} >/dev/null &&
  cmake --build "$BUILD" -j"$(nproc)" --target fusec fusec_c | tail -1
export FUSEC_LIB=$PWD/$BUILD/libfusec_c.so FUSEC=$PWD/$BUILD/fusec
for part in $PARTS; do
  case $part in
    test) python3 tests/python/backend_test.py --device cuda --hf --bf16 ${TEST_ARGS:-} 2>&1 | tee "$OUT/backend_test.log" | grep -v Warning | tail -40 ;;
    gtest) cmake --build "$BUILD" -j"$(nproc)" --target fusec_gpu_tests | tail -1
           "$BUILD"/tests/gpu/fusec_gpu_tests --gtest_filter='CApi*:Executable*' 2>&1 | tail -5 | tee "$OUT/gtest.log" ;;
    debug) python3 scripts/gpu-backend-debug.py 2>&1 | grep -v Warn | tee "$OUT/backend_debug.log" | tail -8 ;;
    bench) python3 bench/torch_backend_bench.py --fusec "$FUSEC" ${BENCH_ARGS:-} 2>"$OUT/backend_bench.err" | tee "$OUT/backend_bench.md"; tail -5 "$OUT/backend_bench.err" ;;
    *) echo "unknown part $part" ;;
  esac
done
