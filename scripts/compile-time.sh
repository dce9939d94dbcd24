#!/usr/bin/env bash
# Compile time against depth: `fusec compile --program train_step` of tiny's width at LAYERS
# (default "250 500 1000") and of medium, each RUNS times (default 3), the fastest wall time
# kept (a shared machine's noise only ever adds). One line a model; the ratio to the first
# depth beside each. A benchmark, not a test: bench/RESULTS.md keeps the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
F=${FUSEC:-build/fusec}
LAYERS=${LAYERS:-250 500 1000}
RUNS=${RUNS:-3}
best() {
  local t b=""
  for ((r = 0; r < RUNS; ++r)); do
    t=$( { /usr/bin/time -f "%e" "$F" compile "$@" --program train_step -o /dev/null 2>&1 >/dev/null; } | tail -1)
    if [[ -z $b ]] || awk "BEGIN{exit !($t < $b)}"; then b=$t; fi
  done
  echo "$b"
}
first=""
for l in $LAYERS; do
  s=$(best --model tiny --layers "$l")
  [[ -n $first ]] || first=$s
  printf 'tiny width, %5d layers: %7.2f s  (%.1fx the %s-layer time)\n' "$l" "$s" "$(awk "BEGIN{print $s / $first}")" "${LAYERS%% *}"
done
printf 'medium (24 layers):        %7.2f s\n' "$(best --model medium)"
