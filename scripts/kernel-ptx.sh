#!/usr/bin/env bash
# The PTX of every kernel source in a folder that scripts/kernel-sources.sh wrote, compiled by
# nvcc for sm_90a, and one hash of it all. For a codegen change whose kernel text moves but
# whose meaning should not (an offset spelled as a macro, a pointer computed another way): run
# it on the sources before and after; equal hashes mean the compiler produced the same program
# for every kernel, which byte-identical text cannot show once the text differs. (nvcc stands
# in for NVRTC here: the same front end and optimiser, without NVRTC's -default-device, which
# the generated sources do not rely on.) Each distinct source compiles once (most programs
# share kernels), on every core. Needs the CUDA toolkit's nvcc (no GPU); without it, one line
# and exit 1.
#   scripts/kernel-sources.sh build/fusec /tmp/k1 && scripts/kernel-ptx.sh /tmp/k1 /tmp/p1
#   ... change, rebuild, the same into /tmp/k2 /tmp/p2 ... && diff /tmp/p1/manifest /tmp/p2/manifest
# OUT/manifest lists each source (relative to SOURCES) with the hash of its PTX.
set -euo pipefail
if [[ $# -ne 2 ]]; then echo "usage: $0 SOURCES_DIR OUT_DIR" >&2; exit 1; fi
src=$(realpath -- "$1") out=$(realpath -m -- "$2")
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [[ ! -x $nvcc ]]; then echo "kernel-ptx.sh: no nvcc (set NVCC or install the CUDA toolkit)" >&2; exit 1; fi
if [[ ! -d $src ]]; then echo "kernel-ptx.sh: no folder '$1'" >&2; exit 1; fi
# OUT is emptied first: it must be neither SOURCES nor a folder around or inside it.
case "$src/" in "$out"/*) echo "kernel-ptx.sh: OUT_DIR '$2' holds the sources" >&2; exit 1 ;; esac
case "$out/" in "$src"/*) echo "kernel-ptx.sh: OUT_DIR '$2' is inside SOURCES_DIR" >&2; exit 1 ;; esac
rm -rf -- "$out" && mkdir -p -- "$out/ptx"
declare -A first  # content hash -> the first source with it
sources=()
while IFS= read -r -d '' f; do sources+=("$f"); done < <(cd "$src" && find . -name '*.cu' -print0 | sort -z)
if [[ ${#sources[@]} -eq 0 ]]; then echo "kernel-ptx.sh: no .cu files under '$1'" >&2; exit 1; fi
hashes=()
for f in "${sources[@]}"; do
  h=$(sha256sum <"$src/$f" | cut -c1-16)
  hashes+=("$h")
  [[ -n ${first[$h]:-} ]] || first[$h]=$f
done
jobs=$(nproc) failed=0
for h in "${!first[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || failed=1; done
  "$nvcc" -std=c++17 -gencode arch=compute_90a,code=sm_90a -ptx -o "$out/ptx/$h.ptx" "$src/${first[$h]}" \
    2>"$out/ptx/$h.err" &
done
while (($(jobs -rp | wc -l) > 0)); do wait -n || failed=1; done
for h in "${!first[@]}"; do
  if [[ ! -s $out/ptx/$h.ptx ]]; then
    echo "kernel-ptx.sh: nvcc failed on ${first[$h]}: $(head -1 "$out/ptx/$h.err")" >&2
    failed=1
  fi
done
((failed == 0)) || exit 1
for i in "${!sources[@]}"; do
  printf '%s %s\n' "${sources[$i]}" "$(sha256sum <"$out/ptx/${hashes[$i]}.ptx" | cut -c1-16)"
done >"$out/manifest"
echo "${#first[@]} distinct sources of ${#sources[@]}; PTX hash $(sha256sum <"$out/manifest" | cut -c1-16)"
