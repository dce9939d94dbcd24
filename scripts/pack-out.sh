#!/usr/bin/env bash
# On a GPU machine, last in a device call: the device tool brings back at most 8 files from
# $OUT, so when a call left more (per-run logs, sanitizer logs, profiles), every file goes into
# $OUT/logs-N.tar.gz (N: the first unused number, so a second script's packing keeps the
# first's) and only the summaries (summary.txt, profiles.txt, env-ab.txt, vs-torch.txt) stay
# beside it. Unpack here with `tar -xzf logs-N.tar.gz`. Nothing moves at 8 files or fewer.
#   OUT=... scripts/pack-out.sh
set -uo pipefail
OUT=${OUT:?OUT is not set}
[[ -d $OUT ]] || exit 0
mapfile -t files < <(cd "$OUT" && find . -type f ! -name 'logs-*.tar.gz' | sed 's|^\./||' | sort)
packs=$(find "$OUT" -maxdepth 1 -name 'logs-*.tar.gz' | wc -l)
((${#files[@]} + packs <= 8)) && exit 0
n=1
while [[ -e $OUT/logs-$n.tar.gz ]]; do n=$((n + 1)); done
tar -czf "$OUT/logs-$n.part" -C "$OUT" "${files[@]}" && mv "$OUT/logs-$n.part" "$OUT/logs-$n.tar.gz" ||
  { echo "pack-out: tar failed; $OUT left as it was" >&2; rm -f "$OUT/logs-$n.part"; exit 1; }
keep=0
for f in "${files[@]}"; do
  case $f in
    summary.txt | profiles.txt | env-ab.txt | vs-torch.txt) keep=$((keep + 1)); continue ;;
  esac
  rm -f "$OUT/$f"
done
find "$OUT" -mindepth 1 -type d -empty -delete
echo "pack-out: ${#files[@]} files in $OUT/logs-$n.tar.gz ($keep summaries kept beside it)"
