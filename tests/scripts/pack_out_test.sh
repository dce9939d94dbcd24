#!/usr/bin/env bash
# scripts/pack-out.sh: over 8 files in $OUT become one archive plus the summaries, every file
# inside it; a second packing takes the next number and keeps the first archive; at 8 files or
# fewer nothing moves.
set -euo pipefail
pack=$(cd "$(dirname "$0")/../.." && pwd)/scripts/pack-out.sh
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
count() { find "$dir" -type f | wc -l; }

for i in 1 2 3; do echo "$i" >"$dir/run$i.log"; done
OUT=$dir bash "$pack"
[[ $(count) == 3 ]] || fail "3 files: nothing should move, found $(count)"

mkdir -p "$dir/sub"
for i in $(seq 4 10); do echo "$i" >"$dir/run$i.log"; done
echo summary >"$dir/summary.txt"
echo nested >"$dir/sub/x.txt"
OUT=$dir bash "$pack" 2>/dev/null
[[ -f $dir/logs-1.tar.gz && -f $dir/summary.txt ]] || fail "no logs-1.tar.gz and summary.txt: $(ls "$dir")"
[[ $(count) == 2 ]] || fail "12 files: the archive and the summary should stay, found $(ls -R "$dir")"
[[ $(tar -tzf "$dir/logs-1.tar.gz" | wc -l) == 12 ]] || fail "the archive should hold all 12 files"
[[ $(tar -xzOf "$dir/logs-1.tar.gz" sub/x.txt) == nested ]] || fail "sub/x.txt's content"

for i in $(seq 1 9); do echo "$i" >"$dir/again$i.log"; done
OUT=$dir bash "$pack" 2>/dev/null
[[ -f $dir/logs-1.tar.gz && -f $dir/logs-2.tar.gz ]] || fail "a second packing should keep logs-1 and add logs-2: $(ls "$dir")"
[[ $(tar -tzf "$dir/logs-2.tar.gz" | grep -c again) == 9 ]] || fail "logs-2 should hold the 9 new logs"
echo "pack-out: ok"
