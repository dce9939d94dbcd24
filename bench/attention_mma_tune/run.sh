#!/usr/bin/env bash
# On a GPU machine: builds every variant *.cu in the working directory for N in $SEQS (default
# 4096 8192) and batch x heads $NBATCH (default 16) (parallel nvcc for sm_90a, binaries in /tmp)
# and runs each. E.g., from a scratch directory:
#   for c in "64 4 0 4 64" "128 4 1 4 32"; do bench/attention_mma_tune/make_variant.py \
#     codegen $c v; done; bench/attention_mma_tune/make_variant.py --wgmma codegen 64 8 0 8 64 w
#   bench/attention_mma_tune/run.sh
SEQS=${SEQS:-4096 8192}
export NBATCH=${NBATCH:-16}
ls ./*.cu | sed 's|^\./||; s/\.cu$//' | while read -r f; do for n in $SEQS; do echo "$f $n"; done; done |
  xargs -P 16 -n 2 sh -c 'nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -DNSEQ=$1 -DNBATCH=$NBATCH -o /tmp/$0_$1 $0.cu > /tmp/$0_$1.log 2>&1 || { echo "build $0 $1 failed"; cat /tmp/$0_$1.log; }'
for n in $SEQS; do for f in $(ls ./*.cu | sed 's|^\./||; s/\.cu$//'); do echo -n "$f: "; timeout 60 "/tmp/${f}_$n"; done; done
