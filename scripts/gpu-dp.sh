#!/usr/bin/env bash
# On a host with 2 or more GPUs: data-parallel training (fusec run --gpus N), every check the
# data-parallel issue asks for, logs to $OUT (default build-gpu/out):
#   correct  20 fp32 steps of `small` on N GPUs at batch B each equal 1 GPU at batch N*B
#            (losses 1e-5 relative, weights 1e-4: scripts/compare_runs.py), N = 2 .. GPUs
#   scale    bf16 weak scaling: the median step on 1 and N GPUs, same per-GPU batch
#   faults   a rank killed mid-run: the others stop within 60 s naming it
#   torch    PyTorch DDP + torch.compile on the same model, batch and GPUs (bench/torch_ddp_ref.py)
#   shard    --shard-optimizer: 20 fp32 and 20 bf16 steps against the unsharded job's; bf16 step
#            times on 1 GPU and on each count of GPUs, unsharded and sharded
#   wire     --grad-reduce-dtype bf16: a 100-step loss curve on a token file against the fp32 wire
#   bench    fusec bench --gpus 1,2,.. (bf16, per SCALE; BENCH_FLAGS adds e.g. --vs-torch): the scaling table,
#            its rows in $OUT/scaling*.jsonl and their figure $OUT/scaling.png (bench/plot.py --scaling)
#   profile  fusec profile --gpus GPUS on medium b16 bf16: the comm category and the exposed collectives
#   bf16     20 bf16 steps of small on N GPUs against 1 GPU with the whole batch (bf16 bounds)
# Every log goes to $OUT/logs; at the end they are packed into $OUT/logs.tgz beside summary.txt.
# Pick parts with PARTS="correct scale faults torch shard wire" and sizes with SCALE="small:64 medium:16".
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BUILD=build-gpu
OUT=${OUT:-$PWD/$BUILD/out}
RESULT=$OUT
OUT=$RESULT/logs
mkdir -p "$OUT"
PARTS=${PARTS:-correct scale faults torch}
SCALE=${SCALE:-small:64 medium:16}
STEPS=${STEPS:-30}
GPUS=$(nvidia-smi -L | wc -l)
counts() { local n=2; while (( n <= GPUS )); do echo $n; n=$((n * 2)); done; }
F=$BUILD/fusec
log() { echo "== $*" | tee -a "$RESULT/summary.txt"; }

build() {
  grep -hE '^#define NCCL_(MAJOR|MINOR|PATCH)' /usr/include/nccl.h | awk '{printf "%s ", $3} END {print "(NCCL headers)"}'
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$BUILD" -j"$(nproc)" --target fusec | tail -1
}

correct() {
  local w=$OUT/dp-init.safetensors
  $F run --init-weights "$w" --model small --seed 1
  $F run --program train_step --model small --weights "$w" --random-inputs --batch 8 --ctx 256 --steps 20 --seed 7 \
    --out "$OUT/dp-1gpu.safetensors" >"$OUT/dp-correct-1.log" 2>&1
  for n in $(counts); do
    $F run --gpus "$n" --program train_step --model small --weights "$w" --random-inputs --batch $((8 / n)) --ctx 256 \
      --steps 20 --seed 7 --out "$OUT/dp-${n}gpu.safetensors" >"$OUT/dp-correct-$n.log" 2>&1 || { log "correct N=$n: run failed"; tail -5 "$OUT/dp-correct-$n.log"; continue; }
    log "correct fp32 small, 1 GPU batch 8 vs $n GPUs batch $((8 / n)) each:"
    python3 scripts/compare_runs.py "$OUT/dp-1gpu.safetensors" "$OUT/dp-${n}gpu.safetensors" | tee -a "$RESULT/summary.txt"
  done
}

scale() {
  for mb in $SCALE; do
    local m=${mb%:*} b=${mb#*:}
    for n in 1 $(counts); do
      local flags=(); (( n > 1 )) && flags=(--gpus "$n")
      $F run "${flags[@]}" --program train_step --model "$m" --dtype bf16 --random-inputs --batch "$b" --ctx 256 \
        --steps "$STEPS" >"$OUT/dp-scale-$m-$n.log" 2>&1
      log "scale bf16 $m b$b, $n GPU(s): $(grep 'median step' "$OUT/dp-scale-$m-$n.log" || tail -2 "$OUT/dp-scale-$m-$n.log")"
    done
  done
}

faults() {
  local n=2
  $F run --gpus $n --program train_step --model small --dtype bf16 --random-inputs --batch 16 --ctx 256 --steps 100000 \
    >"$OUT/dp-fault.log" 2>&1 &
  local job=$!
  sleep 20
  local victim
  victim=$(pgrep -f "fusec run --gpus $n" | while read -r p; do grep -qz '^RANK=1$' /proc/"$p"/environ 2>/dev/null && echo "$p"; done | head -1)
  local t0=$SECONDS
  kill -9 "$victim"
  wait "$job"; local rc=$?
  log "faults: killed rank 1 (pid $victim); the job exited $rc after $((SECONDS - t0)) s:"
  tail -3 "$OUT/dp-fault.log" | tee -a "$RESULT/summary.txt"
}

torch() {
  for mb in $SCALE; do
    local m=${mb%:*} b=${mb#*:}
    local list=1; for n in $(counts); do list=$list,$n; done
    python3 bench/torch_ddp_ref.py --fusec "$F" --model "$m" --batch "$b" --ctx 256 --gpus "$list" --dtype bf16 \
      --warmup 5 --iters 20 >"$OUT/dp-torch-$m.jsonl" 2>"$OUT/dp-torch-$m.err"
    log "torch DDP + torch.compile $m b$b:"
    python3 -c "
import json,sys
for l in open('$OUT/dp-torch-$m.jsonl'):
    r=json.loads(l); print('  %s gpus=%s median %s ms eff %s' % (r.get('impl'), r.get('gpus'), r.get('median_ms'), r.get('scaling_efficiency')))
" | tee -a "$RESULT/summary.txt"
  done
}

shard() {
  local w=$OUT/dp-init.safetensors n=$GPUS
  [[ -f $w ]] || $F run --init-weights "$w" --model small --seed 1
  for flag in "" --shard-optimizer; do
    $F run --gpus "$n" $flag --program train_step --model small --weights "$w" --random-inputs --batch 4 --ctx 256 \
      --steps 20 --seed 7 --out "$OUT/dp-shard${flag:+-on}.safetensors" >"$OUT/dp-shard${flag:+-on}.log" 2>&1
  done
  log "shard: $n GPUs, --shard-optimizer against the unsharded job (fp32 small, 20 steps):"
  python3 scripts/compare_runs.py "$OUT/dp-shard.safetensors" "$OUT/dp-shard-on.safetensors" | tee -a "$RESULT/summary.txt"
  # bf16: the sharded job also keeps only its rows of the f32 master weights (shard-master-weights)
  # and gathers bf16 copies; --out gathers the master weights whole again.
  for flag in "" --shard-optimizer; do
    $F run --gpus "$n" $flag --program train_step --model small --dtype bf16 --weights "$w" --random-inputs --batch 4 \
      --ctx 256 --steps 20 --seed 7 --out "$OUT/dp-shard-bf16${flag:+-on}.safetensors" >"$OUT/dp-shard-bf16${flag:+-on}.log" 2>&1
  done
  log "shard: $n GPUs, --shard-optimizer against the unsharded job (bf16 small, 20 steps):"
  # The bf16 bounds (the bf16 part's): the reduce_scatter and the all_reduce sum in different
  # orders, and bf16 GEMMs carry those last-bit differences on.
  python3 scripts/compare_runs.py "$OUT/dp-shard-bf16.safetensors" "$OUT/dp-shard-bf16-on.safetensors" --loss-rtol 1e-2 \
    --weight-rtol 2e-2 | tee -a "$RESULT/summary.txt"
  # Step times: one GPU, then each GPU count unsharded and sharded, back to back.
  for mb in $SCALE; do
    local m=${mb%:*} b=${mb#*:}
    $F run --program train_step --model "$m" --dtype bf16 --random-inputs --batch "$b" --ctx 256 --steps "$STEPS" \
      >"$OUT/dp-shard-$m-1.log" 2>&1
    log "shard bf16 $m b$b 1 GPU: $(grep 'median step' "$OUT/dp-shard-$m-1.log" || tail -2 "$OUT/dp-shard-$m-1.log")"
    for k in $(counts); do
      for flag in "" --shard-optimizer; do
        $F run --gpus "$k" $flag --program train_step --model "$m" --dtype bf16 --random-inputs --batch "$b" --ctx 256 \
          --steps "$STEPS" >"$OUT/dp-shard-$m-$k$flag.log" 2>&1
        log "shard bf16 $m b$b $k GPUs ${flag:-unsharded}: $(grep 'median step' "$OUT/dp-shard-$m-$k$flag.log" || tail -2 "$OUT/dp-shard-$m-$k$flag.log")"
        $F compile --gpus "$k" $flag --model "$m" --program train_step --dtype bf16 --batch "$b" --ctx 256 --attention fused --stats |
          python3 -c "import json,sys; d=json.load(sys.stdin); print('  resident_bytes', d['resident_bytes'], 'planned_bytes', d['planned_bytes'])" | tee -a "$RESULT/summary.txt"
      done
    done
  done
}

wire() {
  local n=$GPUS tokens=$OUT/dp-tokens.u16
  python3 scripts/make_tokens.py --text README.md docs/*.md bench/RESULTS.md --out "$tokens"
  for d in fp32 bf16; do
    $F run --gpus "$n" --grad-reduce-dtype $d --program train_step --model small --dtype bf16 --data "$tokens" --batch 16 \
      --ctx 256 --steps 100 --seed 3 --out "$OUT/dp-wire-$d.safetensors" >"$OUT/dp-wire-$d.log" 2>&1
  done
  log "wire: 100 bf16 steps of small on $n GPUs, bf16 gradients on the wire against fp32:"
  python3 scripts/compare_runs.py "$OUT/dp-wire-fp32.safetensors" "$OUT/dp-wire-bf16.safetensors" --loss-rtol 2e-2 --weight-rtol 2e-2 |
    tee -a "$OUT/summary.txt"
}

bench() {
  local list=1; for n in $(counts); do list=$list,$n; done
  for mb in $SCALE; do
    local m=${mb%:*} b=${mb#*:}
    $F bench --gpus "$list" --model "$m" --batch "$b" --ctx 256 --dtype bf16 --warmup 5 --iters 20 ${BENCH_FLAGS:-} \
      --format json --out "$OUT/dp-bench-$m.jsonl" 2>"$OUT/dp-bench-$m.err"
    log "bench --gpus $list $m b$b bf16 ${BENCH_FLAGS:-}:"
    python3 -c "
import json
for l in open('$OUT/dp-bench-$m.jsonl'):
    r = json.loads(l)
    eff = r.get('scaling_efficiency'); exp = r.get('exposed_comm_ms'); med = r.get('median_ms')
    print('  %-18s gpus=%d median %s ms  tokens/s %s  scaling %s  exposed %s' % (r['impl'], r['gpus'],
          '%.2f' % med if med else r['status'], '%.0f' % r['tokens_per_s'] if r.get('tokens_per_s') else '-',
          '%.1f%%' % (100 * eff) if eff else '-',
          '%.2f ms (%.1f%%)' % (exp, 100 * exp / med) if exp is not None and med else '-'))
" | tee -a "$RESULT/summary.txt"
  done
  # The rows as they came (every model) and their figure, beside summary.txt.
  cat "$OUT"/dp-bench-*.jsonl >"$RESULT/scaling${BENCH_FLAGS:+$(echo "$BENCH_FLAGS" | tr -d ' -')}.jsonl"
  python3 bench/plot.py --scaling "$RESULT"/scaling*.jsonl --out-dir "$RESULT" >/dev/null 2>&1 ||
    log "bench: no scaling figure (bench/plot.py needs matplotlib)"
}
profile() {
  $F profile --gpus "$GPUS" --model medium --batch 16 --ctx 256 --dtype bf16 --iters 5 >"$OUT/dp-profile-medium.md" 2>"$OUT/dp-profile-medium.err"
  log "profile --gpus $GPUS medium b16 bf16: $(grep -E '^\| comm ' "$OUT/dp-profile-medium.md" | head -1)"
  grep -E "^Collectives" "$OUT/dp-profile-medium.md" | tee -a "$RESULT/summary.txt" || tail -3 "$OUT/dp-profile-medium.err" | tee -a "$RESULT/summary.txt"
}
bf16() {
  local w=$OUT/dp-init.safetensors
  [[ -f $w ]] || $F run --init-weights "$w" --model small --seed 1
  $F run --program train_step --model small --dtype bf16 --weights "$w" --random-inputs --batch 8 --ctx 256 --steps 20 \
    --seed 7 --out "$OUT/dp-bf16-1gpu.safetensors" >"$OUT/dp-bf16-1.log" 2>&1
  for n in $(counts); do
    $F run --gpus "$n" --program train_step --model small --dtype bf16 --weights "$w" --random-inputs --batch $((8 / n)) \
      --ctx 256 --steps 20 --seed 7 --out "$OUT/dp-bf16-${n}gpu.safetensors" >"$OUT/dp-bf16-$n.log" 2>&1 || { log "bf16 N=$n: run failed"; continue; }
    log "bf16 small, 1 GPU batch 8 vs $n GPUs batch $((8 / n)) each (bf16 bounds: losses 1e-2, weights 2e-2):"
    python3 scripts/compare_runs.py "$OUT/dp-bf16-1gpu.safetensors" "$OUT/dp-bf16-${n}gpu.safetensors" --loss-rtol 1e-2 \
      --weight-rtol 2e-2 | tee -a "$RESULT/summary.txt"
  done
}
build 2>&1 | tee "$OUT/build.log"
for part in $PARTS; do $part; done
rm -f "$OUT"/*.safetensors "$OUT"/*.u16
tar czf "$RESULT/logs.tgz" -C "$RESULT" logs && rm -rf "$OUT"
