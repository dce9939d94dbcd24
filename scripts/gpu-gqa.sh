#!/usr/bin/env bash
# On a GPU machine: grouped-query attention end to end. Builds fusec and the GPU tests into
# build-gpu/, runs the fused attention kernels against the interpreter (GQA_TESTS, a gtest
# filter), exports a Llama-style model with fewer key/value heads than query heads
# (tests/python/models/llama.py, GQA_MODEL: constructor kwargs as JSON; GQA_BATCH, GQA_SEQ),
# rewrites a copy into the old form (bench/gqa_as_repeated.py: k and v broadcast over the
# group, dK and dV per query head then summed) and profiles both `train_step`s in bf16 in the
# same call; then the Hugging Face corpus for GQA_FAMILIES. Logs in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BUILD=build-gpu
OUT=${OUT:-$PWD/$BUILD/out}
mkdir -p "$OUT"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1
if ! cmake --build "$BUILD" -j"$(nproc)" --target fusec fusec_gpu_tests >"$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"
  exit 1
fi
"$BUILD/tests/gpu/fusec_gpu_tests" --gtest_filter="${GQA_TESTS:-FusedAttention.*}" >"$OUT/gtest.log" 2>&1
grep -E "^\[  (PASSED|FAILED) |^gqa |Failure|rel err [1-9]" "$OUT/gtest.log" | head -60
export PYTHONPATH=$PWD/frontend/python PATH=$PWD/$BUILD:$PATH
exp=$PWD/$BUILD/gqa-export
rm -rf "$exp"
model=${GQA_MODEL:-'{"vocab_size":8192,"dim":2048,"n_layers":4,"n_heads":16,"n_kv_heads":4,"hidden_dim":5632,"max_seq_len":2048}'}
if (cd tests/python/models && timeout 300 python3 -m fusec.export --model llama.py:Transformer --kwargs "$model" \
      --batch "${GQA_BATCH:-4}" --seq "${GQA_SEQ:-2048}" --no-verify --no-dropout --out "$exp") >"$OUT/export.log" 2>&1; then
  tail -1 "$OUT/export.log"
  python3 bench/gqa_as_repeated.py "$exp/model.fir" "$exp/repeated.fir"
  for f in model repeated; do
    echo "== fusec profile, $f.fir (bf16 train_step)"
    timeout 200 "$BUILD/fusec" profile --fir "$exp/$f.fir" --program train_step --dtype bf16 --iters 20 >"$OUT/profile-$f.txt" 2>&1
    grep -iE "step|attention|categor|total" "$OUT/profile-$f.txt" | head -25
  done
else
  tail -20 "$OUT/export.log"
fi
if [[ -n ${GQA_FAMILIES:-llama} ]]; then
  timeout 300 python3 tests/python/hf_corpus_test.py --device cuda --fusec "$BUILD/fusec" --families "${GQA_FAMILIES:-llama}" \
    >"$OUT/corpus.log" 2>&1
  grep -E "^(ok|FAIL|--)" "$OUT/corpus.log" | tail -30
fi
