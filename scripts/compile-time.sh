#!/usr/bin/env bash
# Compile time against depth: `fusec compile --program train_step` of tiny's width at LAYERS
# (default "250 500 1000") and of medium. RUNS rounds (default 3); a round compiles every
# depth once, back to back, so a round's depths see the same machine load. Printed: each
# depth's fastest time (a shared machine's noise only ever adds) and its ratio to the first
# depth, then the median over the rounds of each round's own ratio of the last depth to the
# first (on a host whose load drifts between minutes, the steadier figure). A benchmark, not a
# test: bench/RESULTS.md keeps the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
F=${FUSEC:-build/fusec}
read -ra LAYERS <<<"${LAYERS:-250 500 1000}"
RUNS=${RUNS:-3}
once() { { /usr/bin/time -f "%e" "$F" compile "$@" --program train_step -o /dev/null 2>&1 >/dev/null; } | tail -1; }
declare -A best
ratios=()
for ((r = 0; r < RUNS; ++r)); do
  first="" last=""
  for l in "${LAYERS[@]}"; do
    t=$(once --model tiny --layers "$l")
    [[ -n $first ]] || first=$t
    last=$t
    if [[ -z ${best[$l]:-} ]] || awk "BEGIN{exit !($t < ${best[$l]})}"; then best[$l]=$t; fi
  done
  ratios+=("$(awk "BEGIN{print $last / $first}")")
done
for l in "${LAYERS[@]}"; do
  printf 'tiny width, %5d layers: %7.2f s  (%.1fx the %s-layer time)\n' "$l" "${best[$l]}" \
    "$(awk "BEGIN{print ${best[$l]} / ${best[${LAYERS[0]}]}}")" "${LAYERS[0]}"
done
printf 'median over %d rounds of the %s / %s-layer ratio: %.2fx (rounds: %s)\n' "$RUNS" "${LAYERS[-1]}" "${LAYERS[0]}" \
  "$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{a[NR] = $1} END {print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}')" \
  "$(printf '%.2f ' "${ratios[@]}")"
m=""
for ((r = 0; r < RUNS; ++r)); do
  t=$(once --model medium)
  if [[ -z $m ]] || awk "BEGIN{exit !($t < $m)}"; then m=$t; fi
done
printf 'medium (24 layers):        %7.2f s\n' "$m"
