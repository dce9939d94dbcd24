#!/usr/bin/env bash
# Compile time against depth, this build against an older tree's, alternating on one host (a
# host's load drifts between minutes, so the two builds take turns). OLD: a source folder of
# the older commit (e.g. `git archive <rev> | tar -x -C .gpu-old`, carried to the device).
# Builds both fusec binaries (Release), then RUNS rounds of scripts/compile-time.sh each.
#   OLD=.gpu-old [NEW_BUILD=build-gpu] [LAYERS="250 1000"] [RUNS=3] scripts/gpu-compile-time-ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${OLD:?OLD: the older tree}
NEW_BUILD=${NEW_BUILD:-build-gpu}
export LAYERS=${LAYERS:-250 1000}
for tree in "$OLD:$OLD/build" ".:$NEW_BUILD"; do
  src=${tree%%:*} dir=${tree#*:}
  [[ -x $dir/fusec ]] && continue
  cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$dir" -j"$(nproc)" --target fusec | tail -1
done
for ((r = 1; r <= ${RUNS:-3}; ++r)); do
  for b in "old:$OLD/build/fusec" "new:$NEW_BUILD/fusec"; do
    echo "== round $r, ${b%%:*} (${b#*:})"
    FUSEC=${b#*:} RUNS=1 scripts/compile-time.sh | sed 's/^/  /'
  done
done
