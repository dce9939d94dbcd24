#!/usr/bin/env bash
# The PTX of every kernel source in a folder that scripts/kernel-sources.sh wrote, compiled by
# nvcc for sm_90a, and one hash of it all. For a codegen change whose kernel text moves but
# whose meaning should not (an offset spelled as a macro, a pointer computed another way): run
# it on the sources before and after; equal hashes mean the compiler produced the same program
# for every kernel, which byte-identical text cannot show once the text differs. Each distinct
# source compiles once (most programs share kernels), on every core. Needs the CUDA toolkit's
# nvcc (no GPU); it says so and exits 1 without it.
#   scripts/kernel-sources.sh build/fusec /tmp/k1 && scripts/kernel-ptx.sh /tmp/k1 /tmp/p1
#   ... change, rebuild, the same into /tmp/k2 /tmp/p2 ... && diff /tmp/p1/manifest /tmp/p2/manifest
# OUT/manifest lists each source (relative to SOURCES) with the hash of its PTX.
set -euo pipefail
if [[ $# -ne 2 ]]; then echo "usage: $0 SOURCES_DIR OUT_DIR" >&2; exit 1; fi
src=$1 out=$2
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [[ ! -x $nvcc ]]; then echo "kernel-ptx.sh: no nvcc (set NVCC or install the CUDA toolkit)" >&2; exit 1; fi
if [[ ! -d $src ]]; then echo "kernel-ptx.sh: no folder '$src'" >&2; exit 1; fi
rm -rf "$out" && mkdir -p "$out/ptx"
# source path -> content hash; each distinct content compiled once, as OUT/ptx/<hash>.ptx
(cd "$src" && find . -name '*.cu' | sort | while read -r f; do echo "$f $(sha256sum <"$f" | cut -c1-16)"; done) >"$out/sources"
awk '{print $2}' "$out/sources" | sort -u | while read -r h; do
  grep -m1 " $h\$" "$out/sources" | awk -v s="$src" -v h="$h" '{print s "/" $1 " " h}'
done >"$out/unique"
compile() {  # SOURCE HASH OUT NVCC
  "$4" -std=c++17 -gencode arch=compute_90a,code=sm_90a -ptx -o "$3/ptx/$2.ptx" "$1" 2>"$3/ptx/$2.err" ||
    { echo "kernel-ptx.sh: nvcc failed on $1:" >&2; head -5 "$3/ptx/$2.err" >&2; return 1; }
}
export -f compile
xargs -a "$out/unique" -P "$(nproc)" -n 2 bash -c 'compile "$0" "$1" "'"$out"'" "'"$nvcc"'"'
while read -r f h; do echo "$f $(sha256sum <"$out/ptx/$h.ptx" | cut -c1-16)"; done <"$out/sources" >"$out/manifest"
echo "$(wc -l <"$out/unique") distinct sources of $(wc -l <"$out/sources"); PTX hash $(sha256sum <"$out/manifest" | cut -c1-16)"
