#!/usr/bin/env python3
# Writes one standalone tuning variant of the tensor-core attention kernels: the template text
# of codegen/attention_mma.cuh instantiated twice (forward, backward) with the given tiling,
# plus harness.cu.inc's timing main. Dense [16, N, d] bf16 operands, causal, N = -DNSEQ.
# Usage: make_variant.py ATTENTION_MMA_CUH D FWD_WARPS FWD_QREG BWD_WARPS BQ PREFIX [BC]
# writes PREFIX_D_FWDWARPS_FWDQREG_BWDWARPS_BQ[_BC].cu in the working directory (BC: the
# forward's and dQ's key tile, default 64).
import os
import sys

src = open(sys.argv[1]).read()
marker = src.index("// ---- the text below is what the kernels' sources embed")
body = src[src.index("\n", marker) + 1:]  # what cmake/embed_cuh.cmake embeds
D, FW, FQ, BW, BQ = map(int, sys.argv[2:7])
prefix = sys.argv[7]
BC = int(sys.argv[8]) if len(sys.argv) > 8 else 64
OT = 1 if D <= 64 else 0  # dQ's o tile, as codegen/attention_kernel.cpp's mmaTiling
here = os.path.dirname(os.path.abspath(__file__))


def header(backward, warps, qreg):
    h = (f'#define FA_BACKWARD {backward}\n#define FA_D {D}\n#define FA_DV {D}\n#define FA_TQ NSEQ\n'
         f'#define FA_TK NSEQ\n#define FA_CAUSAL true\n#define FA_SCALE {1 / D**0.5:.9e}f\n'
         f'#define FA_SCALE_LOG2 {1.4426950408889634 / D**0.5:.9e}f\n#define FA_WARPS {warps}\n'
         f'#define FA_BQ {BQ}\n#define FA_QREG {qreg}\n#define FA_TF32 0\n#define FA_BC {BC}\n'
         f'#define FA_ROWSTATS (NBATCH * NSEQ)\n#define FA_DQ_OTILE {OT}\n')
    for n in ['q', 'k', 'v', 'o', 'do', 'lse']:
        w = 1 if n == 'lse' else D
        h += (f'#define FA_{n.upper()}_RS {w}LL\n__device__ __forceinline__ long long fa_{n}_batch(int z) '
              f'{{ return (long long)z * NSEQ * {w}; }}\n')
    return h


undef = ''.join(f'#undef {m}\n' for m in ['FA_BACKWARD', 'FA_D', 'FA_DV', 'FA_TQ', 'FA_TK', 'FA_CAUSAL', 'FA_SCALE',
                                          'FA_SCALE_LOG2', 'FA_WARPS', 'FA_BQ', 'FA_QREG', 'FA_TF32', 'FA_BC', 'FA_NEG_INF',
                                          'FA_ROWSTATS', 'FA_DQ_OTILE'])
out = '#include <cuda_bf16.h>\ntypedef __nv_bfloat16 fa_t;\n#ifndef NBATCH\n#define NBATCH 16\n#endif\n'
out += 'namespace F {\n' + header(0, FW, FQ) + body + '}\n' + undef
out += 'namespace B {\n' + header(1, BW, 1) + body + '}\n' + undef
out += f'constexpr int D = {D}, FW = {FW}, BW = {BW}, BQV = {BQ}, FQREG = {FQ}, BCV = {BC}, OT = {OT};\n'
out += open(os.path.join(here, 'harness.cu.inc')).read()
open(f'{prefix}_{D}_{FW}_{FQ}_{BW}_{BQ}' + (f'_{BC}' if BC != 64 else '') + '.cu', 'w').write(out)
