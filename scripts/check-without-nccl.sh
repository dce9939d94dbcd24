#!/usr/bin/env bash
# fusec builds without nccl.h (runtime/CMakeLists.txt: data-parallel jobs then say so and stop),
# but a build that has NCCL never compiles the other side of its `#if FUSEC_HAVE_NCCL` lines.
# This compiles, syntax only, every translation unit of BUILD (its compile_commands.json) that
# reads FUSEC_HAVE_NCCL, with the definition taken out, and fails naming the first error. Exit
# 77 (a skip) when BUILD was configured without NCCL: its own build is then the check.
#   scripts/check-without-nccl.sh build
set -uo pipefail
build=${1:?usage: scripts/check-without-nccl.sh BUILD_DIR}
db=$build/compile_commands.json
[[ -f $db ]] || { echo "check-without-nccl: no $db" >&2; exit 1; }
python3 - "$db" <<'PY'
import json, re, shlex, subprocess, sys
entries = json.load(open(sys.argv[1]))
with_nccl = [e for e in entries if "-DFUSEC_HAVE_NCCL=1" in e["command"]]
if not with_nccl:
    print("check-without-nccl: this build has no NCCL; it is the check")
    sys.exit(77)
# Only the NCCL side's own files (collectives.cpp, nccl_entry_points.cpp) need nccl.h.
units = [e for e in with_nccl if not e["file"].endswith(("/collectives.cpp", "/nccl_entry_points.cpp"))
         and "FUSEC_HAVE_NCCL" in open(e["file"], errors="replace").read()]
for e in units:
    cmd = e["command"].replace("-DFUSEC_HAVE_NCCL=1", "")
    cmd = re.sub(r"\s-o\s+\S+", " ", cmd)
    cmd = re.sub(r"\s-c(\s)", r" -fsyntax-only\1", cmd)
    r = subprocess.run(cmd, shell=True, cwd=e["directory"], capture_output=True, text=True)
    if r.returncode != 0:
        first = next((l for l in r.stderr.splitlines() if "error" in l), r.stderr.strip()[:300])
        print(f"FAIL without NCCL: {e['file']}: {first}")
        sys.exit(1)
print(f"check-without-nccl: {len(units)} translation units compile without FUSEC_HAVE_NCCL")
PY
