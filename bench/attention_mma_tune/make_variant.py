#!/usr/bin/env python3
# Writes one standalone tuning variant of the tensor-core attention kernels: the templates'
# text (codegen/attention_common.cuh, attention_mma.cuh and, with --wgmma, attention_wgmma.cuh,
# as cmake/embed_cuh.cmake embeds them) instantiated twice (forward, backward) with the given
# tiling, plus harness.cu.inc's timing main. Dense [16, N, d] bf16 operands, causal, N = -DNSEQ.
# Usage: make_variant.py [--wgmma [--ws=S.P.M]] CODEGEN_DIR D FWD_WARPS FWD_QREG BWD_WARPS BQ PREFIX [BC [BWD_BC]]
# writes PREFIX_D_FWDWARPS_FWDQREG_BWDWARPS_BQ[_BC[_BWDBC]].cu in the working directory (BC: the
# forward's key tile, default 64 (128 with --wgmma); BWD_BC: dQ's, default BC (64 with --wgmma)).
# --wgmma times fa_forward_wgmma, fa_backward_dq_wgmma and fa_backward_dkdv_wgmma (warps in
# warpgroups of 4: FWD_WARPS 8 is two warpgroups of 64 rows); build those variants for sm_90a.
# --ws=S.P.M times fa_forward_wgmma_ws and fa_backward_dkdv_wgmma_ws instead (a producer
# warpgroup beside the consumer warpgroups): S buffers a ring, P 1 for the forward's pingpong
# between two consumers, M 1 for setmaxnreg; the file name gains _wsSPM.
import os
import sys



def smem_layouts(wgmma, d, rows, bc, bq, dq_otile, stages=0, short=False, short_ds=False):
    """The bf16 kernels' shared-memory layouts as codegen/attention_smem.cpp lays them out:
    [(launch, [(array, offset)], bytes)] for the forward, dQ and dK/dV of the mma template and,
    with wgmma, of the wgmma template too (with stages > 0, also of its producer-warpgroup
    forward and dK/dV); with `short`, first the one-launch backward's (fa_backward_short); with
    short_ds (FA_SHORT_DS) it also keeps dS^T, the lower triangle by 16-row key strips of 32-query
    tiles.
    tests/python/attention_smem_test.py checks this copy against the generator's FA_SMEM_* lines."""
    def lay(launch, arrays, base=16):
        placed, off = [], 0
        for name, size in arrays:
            placed.append((name, off))
            off += size
        return launch, placed, off + (base if base > 16 else 0)
    ld = (d + 8) * 2
    ds = [('DS', sum(16 * (rows - w // 2 * 32 + 8) * 2 for w in range(rows // 16))), ('END', 0)] if short_ds else []
    out = [lay('SHORT', [('Q', rows * ld), ('G', rows * ld), ('K', rows * ld), ('V', rows * ld),
                         ('RS', rows * 8)] + ds)] if short else []
    out += [lay('FWD', [('Q', rows * ld), ('K', 2 * bc * ld), ('V', 2 * bc * ld)]),
           lay('DQ', [('Q', rows * ld), ('G', rows * ld)] + ([('O', rows * ld)] if dq_otile else []) +
               [('K', 2 * bc * ld), ('V', 2 * bc * ld)] + ([] if dq_otile else [('D', rows * 4), ('L2', rows * 4)])),
           lay('DKDV', [('K', rows * ld), ('V', rows * ld), ('Q', 2 * bq * ld), ('G', 2 * bq * ld), ('RS', 2 * bq * 8)])]
    if wgmma:
        t = d * 2
        out += [lay('WG_FWD', [('Q', rows * t), ('K', 2 * bc * t), ('V', 2 * bc * t)], 1024),
                lay('WG_DQ', [('Q', rows * t), ('G', rows * t), ('K', 2 * bc * t), ('V', 2 * bc * t), ('D', rows * 4),
                              ('L2', rows * 4)], 1024),
                lay('WG_DKDV', [('K', rows * t), ('V', rows * t), ('Q', 2 * bq * t), ('G', 2 * bq * t), ('RS', 2 * bq * 8)],
                    1024)]
        if stages > 0:
            out += [lay('WG_FWS', [('Q', rows * t), ('K', stages * bc * t), ('V', stages * bc * t), ('BAR', 4 * stages * 8)],
                        1024),
                    lay('WG_DKS', [('K', rows * t), ('V', rows * t), ('Q', stages * bq * t), ('G', stages * bq * t),
                                   ('RS', stages * bq * 8), ('BAR', 2 * stages * 8)], 1024)]
    return out


def smem_macros(layouts):
    return ''.join(f'#define FA_SMEM_{launch}_{name} {off}\n' for launch, arrays, _ in layouts for name, off in arrays)


def smem_macro_names(layouts):
    return [f'FA_SMEM_{launch}_{name}' for launch, arrays, _ in layouts for name, _ in arrays]


def main():
    args = sys.argv[1:]
    wgmma = args[0] == '--wgmma'
    if wgmma:
        args = args[1:]
    ws = None
    if args[0].startswith('--ws='):
        ws = [int(x) for x in args[0][5:].split('.')]
        args = args[1:]
    stages = ws[0] if ws else 0
    codegen = args[0]


    def embedded(name):
        src = open(os.path.join(codegen, name)).read()
        marker = src.index("// ---- the text below is what the kernels' sources embed")
        return src[src.index("\n", marker) + 1:]

    body = embedded('attention_common.cuh') + embedded('attention_mma.cuh')
    if wgmma:
        body += embedded('attention_wgmma.cuh')
    D, FW, FQ, BW, BQ = map(int, args[1:6])
    prefix = args[6]
    BC = int(args[7]) if len(args) > 7 else (128 if wgmma else 64)
    BBC = int(args[8]) if len(args) > 8 else (64 if wgmma else BC)
    OT = 0 if wgmma else 1 if D <= 64 else 0  # dQ's o tile, as codegen/attention_kernel.cpp's mmaTiling
    here = os.path.dirname(os.path.abspath(__file__))

    def layouts(warps, bc):
        return smem_layouts(wgmma, D, 16 * warps, bc, BQ, OT, stages)

    def launch_bytes(warps, bc, launch):
        return next(b for name, _, b in layouts(warps, bc) if name == ('WG_' if wgmma else '') + launch)

    def header(backward, warps, qreg, bc):
        h = (f'#define FA_BACKWARD {backward}\n#define FA_D {D}\n#define FA_DV {D}\n#define FA_TQ NSEQ\n'
             f'#define FA_TK NSEQ\n#define FA_CAUSAL true\n#define FA_SCALE {1 / D**0.5:.9e}f\n'
             f'#define FA_SCALE_LOG2 {1.4426950408889634 / D**0.5:.9e}f\n#define FA_WARPS {warps}\n'
             f'#define FA_BQ {BQ}\n#define FA_QREG {qreg}\n#define FA_TF32 0\n#define FA_BC {bc}\n#define FA_GROUP 1\n'
             f'#define FA_ROWSTATS (NBATCH * NSEQ)\n#define FA_DQ_OTILE {OT}\n#define FA_OUT_RS {D}LL\n'
             f'__device__ __forceinline__ long long fa_out_batch(int z) {{ return (long long)z * NSEQ * {D}; }}\n')
        for n in ['q', 'k', 'v', 'o', 'do', 'lse']:
            w = 1 if n == 'lse' else D
            h += (f'#define FA_{n.upper()}_RS {w}LL\n__device__ __forceinline__ long long fa_{n}_batch(int z) '
                  f'{{ return (long long)z * NSEQ * {w}; }}\n')
        if ws:
            h += f'#define FA_WG_PRODUCER 1\n#define FA_WG_STAGES {ws[0]}\n#define FA_WG_PINGPONG {ws[1]}\n#define FA_WG_MAXNREG {ws[2]}\n'
        return h + smem_macros(layouts(warps, bc))

    undef = ''.join(f'#undef {m}\n' for m in ['FA_BACKWARD', 'FA_D', 'FA_DV', 'FA_TQ', 'FA_TK', 'FA_CAUSAL', 'FA_SCALE',
                                              'FA_SCALE_LOG2', 'FA_WARPS', 'FA_BQ', 'FA_QREG', 'FA_TF32', 'FA_BC', 'FA_NEG_INF',
                                              'FA_ROWSTATS', 'FA_DQ_OTILE', 'FA_GROUP', 'FA_OUT_RS', 'FA_WG_PRODUCER',
                                              'FA_WG_STAGES', 'FA_WG_PINGPONG', 'FA_WG_MAXNREG'] +
                    smem_macro_names(layouts(FW, BC)))
    out = '#include <cuda_bf16.h>\ntypedef __nv_bfloat16 fa_t;\n#ifndef NBATCH\n#define NBATCH 16\n#endif\n'
    out += 'namespace F {\n' + header(0, FW, FQ, BC) + body + '}\n' + undef
    out += 'namespace B {\n' + header(1, BW, 1, BBC) + body + '}\n' + undef
    out += (f'#define WGMMA {int(wgmma)}\n#define WS {int(bool(ws))}\nconstexpr int D = {D}, FW = {FW}, BW = {BW}, BQV = {BQ}, FQREG = {FQ}, '
            f'OT = {OT};\n'
            f'constexpr int SF = {launch_bytes(FW, BC, "FWS" if ws else "FWD")}, SQ = {launch_bytes(BW, BBC, "DQ")}, '
            f'SK = {launch_bytes(BW, BBC, "DKS" if ws else "DKDV")};  // shared memory bytes of each launch\n')
    out += open(os.path.join(here, 'harness.cu.inc')).read()
    suffix = (f'_{BC}' if BC != (128 if wgmma else 64) or BBC != (64 if wgmma else BC) else '') + \
             (f'_{BBC}' if BBC != (64 if wgmma else BC) else '') + ('_ws' + ''.join(map(str, ws)) if ws else '')
    open(f'{prefix}_{D}_{FW}_{FQ}_{BW}_{BQ}{suffix}.cu', 'w').write(out)


if __name__ == '__main__':
    main()
