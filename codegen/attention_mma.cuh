// The CUDA C++ of the tensor-core flash-attention kernels: forward, and the backward's dQ and
// dK/dV passes, with the same entry points, arguments, constants and output layouts as the
// SIMT template (codegen/attention_simt.cuh), which stays the path for every other dtype and
// shape (codegen/attention_kernel.cpp chooses). Two precisions, one text (FA_TF32):
//   * bf16 operands: mma.sync.m16n8k16 bf16, f32 accumulation;
//   * f32 operands: mma.sync.m16n8k8 tf32, three products per step (3xTF32): each operand x
//     is split into big = x with its low 13 mantissa bits cleared (exactly a tf32) and small =
//     x - big (exact in f32), and a b = big_a big_b + big_a small_b + small_a big_b, which
//     drops only small_a small_b and small's own low bits (about 2^-20 relative). The tensor
//     core's f32 accumulation truncates, so long sums (O += P V over thousands of keys) are
//     summed per tile in the tensor core and across tiles with FADD (gemmPB). The result is
//     near f32's own rounding noise (the GPU tests hold it to the SIMT template's 1e-4), at
//     tensor-core rate instead of FFMA's.
//
// FlashAttention-2's work split: a block of FA_WARPS warps owns 16 rows per warp: query rows
// (forward, dQ) or key rows (dK/dV), and walks the other side's tiles through shared memory,
// double-buffered with cp.async (tile t + 1 streams in while tile t is computed). Every
// product is a warp's 16-row strip times a shared tile:
//   * S = Q K^T, dP = dO V^T (and S^T = K Q^T, dP^T = V dO^T): A fragments by ldmatrix from the
//     warp's rows, B fragments by ldmatrix from the tile's rows (row-major [n][k] is the
//     "col" B operand as it is);
//   * O += P V, dQ += dS K, dV += P^T dO, dK += dS^T Q: the left factor never leaves registers
//     and the right one is read from its row-major tile. bf16: an m16n8 f32 accumulator pair
//     is exactly an m16k16 A fragment once packed, and ldmatrix.trans reads the right factor.
//     tf32: an m16n8 accumulator is an m16k8 A fragment if the k order within each 8 is
//     permuted (fragment column c <-> key 2c for c < 4, key 2(c - 4) + 1 above), and the
//     right factor's rows are read in that order with scalar shared loads.
// Shared tiles hold the operand dtype, row-major, each row padded by 16 bytes so the 8 row
// addresses of an ldmatrix phase fall on distinct bank groups (ldmatrix moves 16-byte rows,
// 8 bf16 or 4 f32 values: the same instruction serves both precisions). The softmax is online in the log2 domain (the
// scale folded into one multiply), row max and sum across the 4 lanes of an accumulator row
// by two shuffles, and ex2.approx does the exponentials.
//
// The backward is deterministic (no atomics), as in the SIMT template: dQ is its own pass over
// the key tiles of a query tile; dK and dV sum over the query tiles of a key tile. The row
// statistics D = rowsum(dO o) and L2 = lse log2(e) are computed once, by the dQ pass, which
// leaves them in `fa_rowstats`, a module-scope array (codegen/kernel_abi.h: launches of a
// kernel run in order on one stream). The dK/dV pass streams them in with each query tile, 8
// bytes a row, instead of an o tile and a dot product per row per tile. The dQ launch runs
// even when dq is unused, for the statistics only. dQ sums them from an o tile that streams in
// with its first key tile (FA_DQ_OTILE), or, where that tile would cost it blocks per SM, from
// global memory while its first tiles stream in.
//
// codegen/attention_kernel.cpp defines the constants this text reads, then appends it; the
// generator's source is that text from the line after the marker below.
// ---- the text below is what the kernels' sources embed (cmake/embed_cuh.cmake) ----

namespace fa {

// NVRTC has no math.h, so no INFINITY.
#define FA_NEG_INF (-__int_as_float(0x7f800000))

// FA_WARPS warps of 16 rows each: BR is the block's own rows (query rows of the forward and
// dQ, key rows of dK/dV); BC the key tile the forward and dQ walk, FA_BQ the query tile dK/dV
// walk. The generator picks FA_WARPS, FA_BQ, FA_QREG and FA_DQ_OTILE (how dQ sums the row
// statistics) per shape.
constexpr int NT = 32 * FA_WARPS, BR = 16 * FA_WARPS, BC = FA_BC, BQ = FA_BQ;
constexpr float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;
constexpr int VEC = 16 / sizeof(fa_t);             // elements per 16 bytes
constexpr int KS = FA_TF32 ? 8 : 16;               // k per mma (32 bytes of operand either way)
constexpr int PAD = VEC;                           // 16 bytes per row
constexpr int LD = FA_D + PAD, LDV = FA_DV + PAD;  // row pitches (elements)
static_assert(FA_D % 16 == 0 && FA_DV % 16 == 0, "the mma path needs head dims multiple of 16");
static_assert(BC % 16 == 0 && BQ % 16 == 0, "tiles of whole n16 blocks");

__device__ __forceinline__ unsigned smemAddr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// 16 bytes global -> shared without a register round trip; `valid` false writes zeros (the
// source is then not read, but must still be an address of the operand).
__device__ __forceinline__ void cpAsync16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smemAddr(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cpCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cpWait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Rows [r0, r0 + R) of a [*, W] operand (row stride rs elements) into a shared [R][W + PAD]
// tile, asynchronously; rows at or past `limit` are zeros (a NaN there would survive P = 0).
template <int R, int W>
__device__ __forceinline__ void loadTile(fa_t* dst, const fa_t* src, long long rs, int r0, int limit) {
  constexpr int CPR = W / VEC, N = R * CPR;  // 16-byte chunks per row, per tile
#pragma unroll
  for (int i = 0; i < (N + NT - 1) / NT; ++i) {
    const int e = threadIdx.x + i * NT;
    if (N % NT != 0 && e >= N) break;
    const int r = e / CPR, c = (e % CPR) * VEC, row = r0 + r;
    const bool ok = row < limit;
    cpAsync16(dst + r * (W + PAD) + c, src + (long long)(ok ? row : 0) * rs + c, ok);
  }
}

__device__ __forceinline__ void ldsm4(unsigned (&r)[4], const fa_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smemAddr(p)));
}
__device__ __forceinline__ void ldsm4t(unsigned (&r)[4], const fa_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smemAddr(p)));
}
#if FA_TF32
// An A fragment (16 x 8 tf32) as its big and small parts (the header's 3xTF32).
struct FragA {
  unsigned hi[4], lo[4];
};
// big = x with its low 13 mantissa bits cleared (exactly a tf32), small = x - big (exact in
// f32; the tensor core drops its low bits). Rounding both to nearest with cvt.rna instead
// measured 1.5x slower and no more accurate (the error is the accumulation's: see gemmPB).
__device__ __forceinline__ void split(unsigned x, unsigned& hi, unsigned& lo) {
  hi = x & 0xffffe000u;
  lo = __float_as_uint(__uint_as_float(x) - __uint_as_float(hi));
}
__device__ __forceinline__ FragA fragA(const unsigned (&r)[4]) {
  FragA f;
#pragma unroll
  for (int i = 0; i < 4; ++i) split(r[i], f.hi[i], f.lo[i]);
  return f;
}
__device__ __forceinline__ void mma1(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// c (16 x 8, f32) += a (16 x 8) b (8 x 8): the small cross terms first, the big product last.
__device__ __forceinline__ void mma(float (&c)[4], const FragA& a, unsigned b0, unsigned b1) {
  unsigned bh0, bl0, bh1, bl1;
  split(b0, bh0, bl0);
  split(b1, bh1, bl1);
  mma1(c, a.lo, bh0, bh1);
  mma1(c, a.hi, bl0, bl1);
  mma1(c, a.hi, bh0, bh1);
}
#else
struct FragA {
  unsigned r[4];
};
__device__ __forceinline__ FragA fragA(const unsigned (&r)[4]) { return FragA{{r[0], r[1], r[2], r[3]}}; }
// c (16 x 8, f32) += a (16 x 16) b (16 x 8).
__device__ __forceinline__ void mma(float (&c)[4], const FragA& a, unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ unsigned pack(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // lo in the low half: the lower column
  return *reinterpret_cast<unsigned*>(&h);
}
#endif
// x rounded to the operand dtype and back.
__device__ __forceinline__ float roundTo(float x) {
#if FA_TF32
  return x;
#else
  return __bfloat162float(__float2bfloat16_rn(x));
#endif
}
// Two adjacent results (columns c, c + 1 of a row) stored in the operand dtype.
__device__ __forceinline__ void store2(fa_t* p, float x, float y) {
#if FA_TF32
  *reinterpret_cast<float2*>(p) = make_float2(x, y);
#else
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
#endif
}
#if !FA_TF32
// Row g + 8 h of a 16 x W accumulator tile (this lane's), scaled and rounded to the operand
// dtype, handed to put(column, 16 bytes) in pieces of eight adjacent columns.
// An m16n8 accumulator gives each lane two adjacent columns of every n8 block: stored as they
// are, a warp's store writes 4 bytes to each of 32 places, eight rows by 16 bytes, half of each
// 32-byte sector. A transpose among each quad of lanes (two rounds of xor shuffles) hands lane
// t4 the whole n8 block 4i + t4 of every four, so a warp's store writes eight rows by 64
// bytes, whole sectors, with a quarter of the store instructions. Every lane must call it (the
// shuffles); put decides what is stored.
template <int W, class Put>
__device__ __forceinline__ void rowPieces(const float (&acc)[W / 8][4], int h, float scale, Put put) {
  static_assert(W % 32 == 0, "whole groups of four n8 blocks");
  const int t4 = threadIdx.x & 3;
#pragma unroll
  for (int i = 0; i < W / 32; ++i) {
    unsigned v[4];  // lane t4: block 4i + c's columns 2 t4, 2 t4 + 1, by c; then block 4i + t4's, by pair
#pragma unroll
    for (int c = 0; c < 4; ++c) v[c] = pack(acc[4 * i + c][2 * h] * scale, acc[4 * i + c][2 * h + 1] * scale);
#pragma unroll
    for (int k = 0; k < 2; ++k) {  // 2 x 2 blocks transposed between lanes t4 ^ 1
      const bool odd = t4 & 1;
      const unsigned y = __shfl_xor_sync(0xffffffffu, odd ? v[2 * k] : v[2 * k + 1], 1);
      if (odd) v[2 * k] = y;
      else v[2 * k + 1] = y;
    }
#pragma unroll
    for (int k = 0; k < 2; ++k) {  // then the off-diagonal 2 x 2 blocks swapped between lanes t4 ^ 2
      const bool high = t4 & 2;
      const unsigned y = __shfl_xor_sync(0xffffffffu, high ? v[k] : v[k + 2], 2);
      if (high) v[k] = y;
      else v[k + 2] = y;
    }
    put(8 * (4 * i + t4), make_uint4(v[0], v[1], v[2], v[3]));
  }
}
#endif

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The A fragments (16 x W, by KS chunk) of the 16 rows of a shared tile at `a` (pitch LA).
// ldmatrix.x4 row addresses: a 16-row x 32-byte block at (lane & 15, 16 bytes (lane >> 4)).
template <int W, int LA>
__device__ __forceinline__ void loadA(FragA (&af)[W / KS], const fa_t* a) {
  const int lane = threadIdx.x & 31;
  const fa_t* pa = a + (lane & 15) * LA + (lane >> 4) * VEC;
#pragma unroll
  for (int kc = 0; kc < W / KS; ++kc) {
    unsigned r[4];
    ldsm4(r, pa + kc * KS);
    af[kc] = fragA(r);
  }
}

// acc (16 x N) += A (16 x W) B^T, B = [N][W] row-major in shared memory (pitch LB); A is given
// either as fragments in registers (af) or, when af is null, as the 16 rows of a shared tile
// at `a` (pitch LA) read chunk by chunk (fewer live registers).
template <int N, int W, int LA, int LB>
__device__ __forceinline__ void gemmABt(float (&acc)[N / 8][4], const FragA* af, const fa_t* a, const fa_t* b) {
  const int lane = threadIdx.x & 31;
  // ldmatrix.x4 row addresses: A as in loadA; B two n8 x 32-byte blocks at (n: (lane & 7) +
  // 8 (lane >> 4), k: 16 bytes ((lane >> 3) & 1)). In both precisions the four matrices are
  // the b0, b1 of n block 0 and then of n block 1.
  const fa_t* pa = a + (lane & 15) * LA + (lane >> 4) * VEC;
  const fa_t* pb = b + ((lane & 7) + ((lane >> 4) << 3)) * LB + ((lane >> 3) & 1) * VEC;
#pragma unroll
  for (int kc = 0; kc < W / KS; ++kc) {
    FragA at;
    if (af) {
      at = af[kc];
    } else {
      unsigned r[4];
      ldsm4(r, pa + kc * KS);
      at = fragA(r);
    }
#pragma unroll
    for (int n = 0; n < N / 16; ++n) {
      unsigned bf[4];
      ldsm4(bf, pb + n * 16 * LB + kc * KS);
      mma(acc[2 * n], at, bf[0], bf[1]);
      mma(acc[2 * n + 1], at, bf[2], bf[3]);
    }
  }
}

// acc (16 x N) += P (16 x K) B: P in accumulator layout (K/8 tiles of 16 x 8, f32), B = [K][N]
// row-major in shared memory (pitch LB).
#if FA_TF32
// Accumulator tile j holds, for rows g and g + 8, keys 8j + 2 t4 and 8j + 2 t4 + 1: with the
// header's k permutation that is the A fragment {c0, c2, c1, c3}, and B's fragment rows are
// keys 8j + 2 t4 (b0) and 8j + 2 t4 + 1 (b1) at column g. The pitch LB is a multiple of 16
// plus the 4-word pad, so 2 LB is 8 mod 32 words and the 32 lanes' (2 t4 LB + g) hit 32
// distinct banks.
// The tile's product goes to a zeroed partial, added to acc with FADD: mma's accumulation
// truncates, and summed into acc across every tile (4096 keys: 1536 mma steps) that bias
// reached 4e-5 of dK, dV; per tile it is 24 steps, and across tiles the sum rounds to nearest.
// Partials of up to 4 n blocks at a time (16 registers) keep the register count of d 128.
template <int K, int N, int LB>
__device__ __forceinline__ void gemmPB(float (&acc)[N / 8][4], const float (&p)[K / 8][4], const fa_t* b) {
  constexpr int NB = N / 8, G = NB % 4 == 0 ? 4 : NB % 3 == 0 ? 3 : NB % 2 == 0 ? 2 : 1;  // d 80: 2
  const int lane = threadIdx.x & 31;
  const fa_t* pb = b + 2 * (lane & 3) * LB + (lane >> 2);
#pragma unroll
  for (int n0 = 0; n0 < N / 8; n0 += G) {
    float part[G][4];
#pragma unroll
    for (int j = 0; j < G; ++j) part[j][0] = part[j][1] = part[j][2] = part[j][3] = 0.f;
#pragma unroll
    for (int kc = 0; kc < K / 8; ++kc) {
      const unsigned r[4] = {__float_as_uint(p[kc][0]), __float_as_uint(p[kc][2]), __float_as_uint(p[kc][1]),
                             __float_as_uint(p[kc][3])};
      const FragA af = fragA(r);
#pragma unroll
      for (int j = 0; j < G; ++j) {
        const fa_t* x = pb + kc * 8 * LB + (n0 + j) * 8;
        mma(part[j], af, __float_as_uint(x[0]), __float_as_uint(x[LB]));
      }
    }
#pragma unroll
    for (int j = 0; j < G; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[n0 + j][e] += part[j][e];
  }
}
#else
// One k16 step: acc (16 x N) += A (16 x 16, fragments) B, B = 16 rows of [*][N] row-major in
// shared memory (pitch LB), read transposed by ldmatrix.trans.
template <int N, int LB>
__device__ __forceinline__ void mmaAB(float (&acc)[N / 8][4], const FragA& af, const fa_t* b) {
  const int lane = threadIdx.x & 31;
  // ldmatrix.x4.trans row addresses: two k16 x n8 blocks at (k: (lane & 7) + 8 ((lane >> 3) & 1),
  // n: 8 (lane >> 4)).
  const fa_t* pb = b + ((lane & 7) + (((lane >> 3) & 1) << 3)) * LB + (lane >> 4) * 8;
#pragma unroll
  for (int n = 0; n < N / 16; ++n) {
    unsigned bf[4];
    ldsm4t(bf, pb + n * 16);
    mma(acc[2 * n], af, bf[0], bf[1]);
    mma(acc[2 * n + 1], af, bf[2], bf[3]);
  }
}
// k16 step kc of a 16 x K accumulator tile (f32) as an A fragment in bf16: an m16n8
// accumulator's two n8 blocks 2 kc, 2 kc + 1 are exactly that step's a0 .. a3.
template <int K>
__device__ __forceinline__ FragA packStep(const float (&p)[K / 8][4], int kc) {
  return FragA{{pack(p[2 * kc][0], p[2 * kc][1]), pack(p[2 * kc][2], p[2 * kc][3]),
                pack(p[2 * kc + 1][0], p[2 * kc + 1][1]), pack(p[2 * kc + 1][2], p[2 * kc + 1][3])}};
}
// Every step's at once (the short backward's dS^T: dK's operand, and with dS kept its stored copy).
template <int K>
__device__ __forceinline__ void packA(FragA (&af)[K / 16], const float (&p)[K / 8][4]) {
#pragma unroll
  for (int kc = 0; kc < K / 16; ++kc) af[kc] = packStep<K>(p, kc);
}
// acc (16 x N) += A (16 x K, packed fragments) B (K x N in shared memory, pitch LB).
template <int K, int N, int LB>
__device__ __forceinline__ void gemmFB(float (&acc)[N / 8][4], const FragA (&af)[K / 16], const fa_t* b) {
#pragma unroll
  for (int kc = 0; kc < K / 16; ++kc) mmaAB<N, LB>(acc, af[kc], b + kc * 16 * LB);
}
// The same from the f32 tile, each step packed just before its product (fewer live registers).
template <int K, int N, int LB>
__device__ __forceinline__ void gemmPB(float (&acc)[N / 8][4], const float (&p)[K / 8][4], const fa_t* b) {
#pragma unroll
  for (int kc = 0; kc < K / 16; ++kc) mmaAB<N, LB>(acc, packStep<K>(p, kc), b + kc * 16 * LB);
}
#endif

template <int N>
__device__ __forceinline__ void zero(float (&a)[N][4]) {
#pragma unroll
  for (int j = 0; j < N; ++j) a[j][0] = a[j][1] = a[j][2] = a[j][3] = 0.f;
}

// Whether query row `qi` sees key `kj`.
__device__ __forceinline__ bool visible(int qi, int kj) {
  return qi < FA_TQ && kj < FA_TK && (!FA_CAUSAL || kj <= qi + (FA_TK - FA_TQ));
}
// Whether the tile of query rows [q0, q0 + R) x keys [k0, k0 + C) needs the mask: a tail, or
// (causal) a key past the first row's diagonal. Uniform per block.
template <int R, int C>
__device__ __forceinline__ bool needsMask(int q0, int k0) {
  return q0 + R > FA_TQ || k0 + C > FA_TK || (FA_CAUSAL && k0 + C - 1 > q0 + (FA_TK - FA_TQ));
}

#if FA_BACKWARD
// RoPE's tables for the stores of dQ (qc, qs) and of dK (kc, ks), [T][d / 2] f32 each, where
// the backward stores the gradients of the rotation's inputs (storeRows); null: stored as
// computed. attention_kernel.cpp passes them where ir/attention_assembly.h matched a rotation.
struct FaRope {
  const float* qc = nullptr;
  const float* qs = nullptr;
  const float* kc = nullptr;
  const float* ks = nullptr;
};

// s + the dot product of two 16-byte vectors of the operand dtype (D = rowsum(dO o)).
__device__ __forceinline__ float dotVec(uint4 a, uint4 b, float s) {
#if FA_TF32
  return fmaf(__uint_as_float(a.x), __uint_as_float(b.x),
              fmaf(__uint_as_float(a.y), __uint_as_float(b.y),
                   fmaf(__uint_as_float(a.z), __uint_as_float(b.z), fmaf(__uint_as_float(a.w), __uint_as_float(b.w), s))));
#else
  const __nv_bfloat162* pa = reinterpret_cast<const __nv_bfloat162*>(&a);
  const __nv_bfloat162* pb = reinterpret_cast<const __nv_bfloat162*>(&b);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __bfloat1622float2(pa[i]), y = __bfloat1622float2(pb[i]);
    s = fmaf(x.x, y.x, fmaf(x.y, y.y, s));
  }
  return s;
#endif
}

// The backward's row statistics {D, L2} of every (batch index, query row), written by the dQ
// pass and read by the dK/dV pass.
__device__ float2 fa_rowstats[FA_ROWSTATS];

// Thread `part` of a row's TPR threads: its 16-byte pieces of a dv-wide row, columns
// (part + i TPR) VEC below FA_DV, o's held in registers. D's partial sum runs over them in that
// order wherever a row's threads sum it (rowStats, the one-launch backward's shortLoad), and
// rowSum adds the row's threads: the same bits from global or shared dO.
template <int TPR>
struct RowPieces {
  static constexpr int N = (FA_DV + TPR * VEC - 1) / (TPR * VEC);
  uint4 o[N];
  __device__ __forceinline__ static int col(int part, int i) { return (part + i * TPR) * VEC; }
  __device__ __forceinline__ void load(const fa_t* oRow, int part) {
#pragma unroll
    for (int i = 0; i < N; ++i)
      if (col(part, i) < FA_DV) o[i] = *reinterpret_cast<const uint4*>(oRow + col(part, i));
  }
  __device__ __forceinline__ float dot(const fa_t* dORow, int part) const {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < N; ++i)
      if (col(part, i) < FA_DV) s = dotVec(o[i], *reinterpret_cast<const uint4*>(dORow + col(part, i)), s);
    return s;
  }
};
template <int TPR>
__device__ __forceinline__ float rowSum(float s) {
#pragma unroll
  for (int off = 1; off < TPR; off <<= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  return s;
}

// {D, L2} of rows [q0, q0 + R) into `out` (fa_rowstats of this batch index) unless it is null,
// and into shared D[r], L2[r] unless D is null; D = sum_d dO o and L2 = lse log2(e), from
// global memory: NT / R threads per row, 16-byte loads. The dQ launch's statistics-only form
// (dq unused) and its form where an o tile would cost it blocks per SM (!FA_DQ_OTILE).
template <int R>
__device__ __forceinline__ void rowStats(float* D, float* L2, float2* out, const fa_t* o, const fa_t* dO,
                                         const float* lse, int q0) {
  constexpr int TPR = NT / R;
  const int r = threadIdx.x / TPR, part = threadIdx.x % TPR, row = q0 + r;
  float s = 0.f;
  if (row < FA_TQ) {
    RowPieces<TPR> pieces;
    pieces.load(o + (long long)row * FA_O_RS, part);
    s = pieces.dot(dO + (long long)row * FA_DO_RS, part);
  }
  s = rowSum<TPR>(s);
  if (part == 0) {
    const float l2 = row < FA_TQ ? lse[row] * LOG2E : 0.f;
    if (out && row < FA_TQ) out[row] = make_float2(s, l2);
    if (D) D[r] = s, L2[r] = l2;
  }
}

// The same for a warp's 16 rows [r0, r0 + 16), D from its shared o and dO rows (pitch LDV),
// two lanes a row; `l2` is lane's row (r0 + lane / 2) L2, loaded by the caller. Returns, in
// D[h], L2[h], the statistics of rows g and g + 8 (g = lane / 4: the accumulator rows).
__device__ __forceinline__ void warpRowStats(float (&D)[2], float (&L2)[2], const fa_t* Os, const fa_t* Gs, float l2,
                                             float2* out, int r0) {
  const int lane = threadIdx.x & 31, r = lane >> 1, g = lane >> 2;
  RowPieces<2> pieces;
  pieces.load(Os + r * LDV, lane & 1);
  const float s = rowSum<2>(pieces.dot(Gs + r * LDV, lane & 1));
  if ((lane & 1) == 0 && r0 + r < FA_TQ) out[r0 + r] = make_float2(s, l2);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    D[h] = __shfl_sync(0xffffffffu, s, 2 * (g + 8 * h));
    L2[h] = __shfl_sync(0xffffffffu, l2, 2 * (g + 8 * h));
  }
}

using cptr = const fa_t* __restrict__;  // the entry points' operand pointers, by reference below
// The backward's operands moved to (query) batch index z: the dQ pass's and the one-launch
// backward's.
__device__ __forceinline__ void backwardOperands(int z, cptr& q, cptr& k, cptr& v, cptr& o, cptr& dO,
                                                 const float* __restrict__& lse) {
  q += fa_q_batch(z);
  k += fa_k_batch(z);
  v += fa_v_batch(z);
  o += fa_o_batch(z);
  dO += fa_do_batch(z);
  lse += fa_lse_batch(z);
}

// The dQ pass's start, both tensor-core templates: its operands moved to batch index z, and
// when dq is unused (a null dq) the row statistics only, which the dK/dV pass reads. Returns
// false when that was all.
template <int R>
__device__ __forceinline__ bool dqOperands(int z, int q0, cptr& q, cptr& k, cptr& v, cptr& o, cptr& dO,
                                           const float* __restrict__& lse, float2*& stats, const fa_t* dq) {
  backwardOperands(z, q, k, v, o, dO, lse);
  stats = fa_rowstats + (long long)z * FA_TQ;
  if (dq) return true;
  rowStats<R>(nullptr, nullptr, stats, o, dO, lse, q0);
  return false;
}

// The dK/dV pass's walk, both tensor-core templates: for the key rows from k0, step `it` is
// query tile `first + it % span` (causal: query rows before k0 - (TK - TQ) see none of these
// keys, so the walk starts at `first`) of the group's query head `it / span`
// (grouped-query attention's FA_GROUP heads z * FA_GROUP .. read key/value head z).
struct QueryWalk {
  int first, span, steps;
  __device__ __forceinline__ explicit QueryWalk(int k0) {
    first = FA_CAUSAL ? max(0, k0 - (FA_TK - FA_TQ)) / BQ : 0;
    span = (FA_TQ + BQ - 1) / BQ - first;
    steps = FA_GROUP * span;
  }
  __device__ __forceinline__ int head(int z, int it) const { return z * FA_GROUP + it / span; }
  __device__ __forceinline__ int q0(int it) const { return (first + it % span) * BQ; }
};

#if !FA_TF32
// A 16-byte piece of a row (eight bf16, columns c .. c + 7: pairs c / 2 .. c / 2 + 3) rotated
// by RoPE's entries for those pairs, cos at `c` and sin at `s` (four f32 each, 16-byte aligned):
// x cos - y sin, x sin + y cos, rounded to bf16 again.
__device__ __forceinline__ uint4 ropePiece(uint4 x, const float* __restrict__ c, const float* __restrict__ s) {
  const float4 cv = __ldg(reinterpret_cast<const float4*>(c)), sv = __ldg(reinterpret_cast<const float4*>(s));
  const float cs[4] = {cv.x, cv.y, cv.z, cv.w}, sn[4] = {sv.x, sv.y, sv.z, sv.w};
  unsigned v[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 p = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v[k]));
    v[k] = pack(p.x * cs[k] - p.y * sn[k], p.x * sn[k] + p.y * cs[k]);
  }
  return make_uint4(v[0], v[1], v[2], v[3]);
}
#endif

// Rows r0 + g and r0 + g + 8 (those below `limit`) of a warp's 16 x W accumulator, times
// `scale`, into dst (row r at dst + r RS, W columns): dQ, dK and dV of both backward
// templates. RS is the result's row stride (W, or its part's in a tensor assembled from dq, dk
// and dv: attention_kernel.cpp's FA_D*_OUT_RS).
// With RoPE's tables rc and rs ([T][W / 2] f32, the row's position indexing them: the
// backward rotation of a model's rotary embedding, done where the gradient is stored,
// ir/attention_assembly.h) each pair of columns (2i, 2i + 1) is first rounded to fa_t, as a
// stored dQ or dK would be, then stored as x c - y s, x s + y c with c = rc[r][i], s =
// rs[r][i]. In 16-byte pieces the rotation takes the transposed piece (four whole pairs, one
// float4 of each table); element-wise, each lane's pair (columns 8j + 2 t4, + 1).
template <int W, long long RS = W>
__device__ __forceinline__ void storeRows(fa_t* dst, const float (&acc)[W / 8][4], int r0, int limit, float scale,
                                          const float* __restrict__ rc = nullptr, const float* __restrict__ rs = nullptr) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
#if !FA_TF32
  // 16-byte pieces where the output allows them (a caller's buffer may sit at any even address,
  // a table at any float's).
  if constexpr (W % 32 == 0 && RS % 8 == 0)
    if (((reinterpret_cast<unsigned long long>(dst) | reinterpret_cast<unsigned long long>(rc) |
          reinterpret_cast<unsigned long long>(rs)) & 15) == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = r0 + g + 8 * h;
        rowPieces<W>(acc, h, scale, [&](int c, uint4 x) {
          if (r >= limit) return;
          if (rc) x = ropePiece(x, rc + (long long)r * (W / 2) + c / 2, rs + (long long)r * (W / 2) + c / 2);
          *reinterpret_cast<uint4*>(dst + (long long)r * RS + c) = x;
        });
      }
      return;
    }
#endif
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + g + 8 * h;
    if (r >= limit) continue;
#pragma unroll
    for (int j = 0; j < W / 8; ++j) {
      float x = acc[j][2 * h] * scale, y = acc[j][2 * h + 1] * scale;
      if (rc) {
        const long long at = (long long)r * (W / 2) + 4 * j + t4;
        const float c = __ldg(rc + at), sn = __ldg(rs + at), xr = roundTo(x), yr = roundTo(y);
        x = xr * c - yr * sn;
        y = xr * sn + yr * c;
      }
      store2(dst + (long long)r * RS + 8 * j + 2 * t4, x, y);
    }
  }
}

// dK/dV's elementwise step on one query tile in accumulator layout (this thread's key rows kw
// and kw + 8, query columns q0 + 8 j + 2 t4 + (e & 1)): S^T becomes P^T = exp(S^T scale - L2),
// 0 where the causal mask hides the pair, and dP^T becomes dS^T / scale = P^T (dP^T - D) (the
// scale is applied once, to dK), from each query's {D, L2} in Rb. The mma.sync and the wgmma
// dK/dV passes share it (an m64nN wgmma accumulator is mma.sync's layout per warp).
template <int C>
__device__ __forceinline__ void dsTransposed(float (&s)[C / 8][4], float (&dp)[C / 8][4], const float2* Rb, int q0, int kw,
                                             bool mask) {
  const int t4 = threadIdx.x & 3;
#pragma unroll
  for (int j = 0; j < C / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = 8 * j + 2 * t4 + (e & 1);
      const float2 st = Rb[c];  // {D, L2} of query q0 + c
      float p = ex2(s[j][e] * FA_SCALE_LOG2 - st.y);
      if (mask && !visible(q0 + c, kw + 8 * (e >> 1))) p = 0.f;
      s[j][e] = p;                       // P^T
      dp[j][e] = p * (dp[j][e] - st.x);  // dS^T / scale
    }
}

// dQ's elementwise step on one key tile in accumulator layout (this thread's query rows qw and
// qw + 8, key columns k0 + 8 j + 2 t4 + (e & 1)): S becomes dS / scale = P (dP - D), P =
// exp(S scale - L2), 0 where the mask hides the pair (the scale is applied once, to dQ). The
// dQ pass and the one-launch backward share it.
template <int C>
__device__ __forceinline__ void dsRows(float (&s)[C / 8][4], const float (&dp)[C / 8][4], const float (&D)[2],
                                       const float (&L2)[2], int qw, int k0, bool mask) {
  const int t4 = threadIdx.x & 3;
#pragma unroll
  for (int j = 0; j < C / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int h = e >> 1;
      float p = ex2(s[j][e] * FA_SCALE_LOG2 - L2[h]);
      if (mask && !visible(qw + 8 * h, k0 + 8 * j + 2 * t4 + (e & 1))) p = 0.f;
      s[j][e] = p * (dp[j][e] - D[h]);
    }
}

// Row statistics [r0, r0 + R) of `src` into shared memory, asynchronously (8-byte copies) by
// THREADS threads (the block's, or a producer warpgroup's; `tid` this thread's number among
// them); rows at or past FA_TQ are zeros.
template <int R, int THREADS = NT>
__device__ __forceinline__ void loadRowStats(float2* dst, const float2* src, int r0, int tid = threadIdx.x) {
  for (int r = tid; r < R; r += THREADS) {
    const bool ok = r0 + r < FA_TQ;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smemAddr(dst + r)), "l"(src + (ok ? r0 + r : 0)),
                 "r"(ok ? 8 : 0));
  }
}
#endif  // FA_BACKWARD

}  // namespace fa

#if !FA_BACKWARD
namespace fa {

// One key tile's online softmax, for the thread's rows g and g + 8 of a warp's 16 (query rows
// r0 + g, r0 + g + 8) against keys [k0, k0 + C) in accumulator layout: masks s where `mask`
// says a tile needs it, turns s into P = exp(s scale - running max) in place, updates the
// running max m and this thread's partial sum l, and returns in alpha the factor by which the
// output accumulator must be rescaled (rescale below; the wgmma forward applies it only once
// the product that still writes the accumulator has finished). The mma forward and the wgmma
// forward (attention_wgmma.cuh) share it: an m64nN wgmma accumulator is, per warp, the m16n8
// accumulators of mma.sync side by side.
template <int C>
__device__ __forceinline__ void softmaxTile(float (&s)[C / 8][4], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                            bool mask, int r0, int k0) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int j = 0; j < C / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (mask && !visible(r0 + g + 8 * (e >> 1), k0 + 8 * j + 2 * t4 + (e & 1))) s[j][e] = FA_NEG_INF;
    }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = FA_NEG_INF;
#pragma unroll
    for (int j = 0; j < C / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    // The max of the raw scores (the scale is positive: the generator's condition), so that
    // each exponent is one FFMA: s scale log2(e) - base.
    const float mNew = fmaxf(m[h], mx);
    const float base = mNew == FA_NEG_INF ? 0.f : mNew * FA_SCALE_LOG2;  // nothing visible yet: 0
    alpha[h] = ex2(fmaf(m[h], FA_SCALE_LOG2, -base));
    m[h] = mNew;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < C / 8; ++j) {
      s[j][2 * h] = ex2(fmaf(s[j][2 * h], FA_SCALE_LOG2, -base));
      s[j][2 * h + 1] = ex2(fmaf(s[j][2 * h + 1], FA_SCALE_LOG2, -base));
      sum += s[j][2 * h] + s[j][2 * h + 1];
    }
    l[h] = l[h] * alpha[h] + sum;
  }
}

// acc's rows g and g + 8 times alpha[0] and alpha[1].
__device__ __forceinline__ void rescale(float (&acc)[FA_DV / 8][4], const float (&alpha)[2]) {
#pragma unroll
  for (int j = 0; j < FA_DV / 8; ++j) {
    acc[j][0] *= alpha[0], acc[j][1] *= alpha[0];
    acc[j][2] *= alpha[1], acc[j][3] *= alpha[1];
  }
}

// One key tile of the mma forward for a warp's 16 query rows from r0 (Qw, read as qa's
// fragments where those are given) against keys [k0, k0 + BC) (Kt, Vt): S = Q K^T, the online
// softmax, acc = acc alpha + P V.
__device__ __forceinline__ void forwardTile(float (&acc)[FA_DV / 8][4], float (&m)[2], float (&l)[2], const FragA* qa,
                                            const fa_t* Qw, const fa_t* Kt, const fa_t* Vt, bool mask, int r0, int k0) {
  float s[BC / 8][4];
  zero(s);
  gemmABt<BC, FA_D, LD, LD>(s, qa, Qw, Kt);
  float alpha[2];
  softmaxTile<BC>(s, m, l, alpha, mask, r0, k0);
  rescale(acc, alpha);
  gemmPB<BC, FA_DV, LDV>(acc, s, Vt);
}

// The forward's results for the thread's rows (query rows r0 + g, r0 + g + 8 of batch index
// z): O = acc / rowsum into o (unless null), and the log-sum-exp into lse (unless null).
__device__ __forceinline__ void storeForward(const float (&acc)[FA_DV / 8][4], const float (&m)[2], const float (&l)[2],
                                             fa_t* o, float* lse, int z, int r0) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const long long ob = (long long)z * FA_TQ;
  fa_t* const ob0 = o ? o + fa_out_batch(z) : nullptr;
  // 16-byte pieces where the output allows them (a caller's buffer may sit at any even address).
  const bool pieces = !FA_TF32 && FA_DV % 32 == 0 && FA_OUT_RS % 8 == 0 && (reinterpret_cast<unsigned long long>(ob0) & 15) == 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = l[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int qi = r0 + g + 8 * h;
    const float inv = 1.f / sum;  // sum = 0 (nothing visible) gives NaN, as softmax over -inf
#if !FA_TF32
    if constexpr (FA_DV % 32 == 0) {
      if (pieces)  // uniform: every lane takes part in the shuffles
        rowPieces<FA_DV>(acc, h, inv, [&](int c, uint4 x) {
          if (qi < FA_TQ) *reinterpret_cast<uint4*>(ob0 + (long long)qi * FA_OUT_RS + c) = x;
        });
    }
#endif
    if (qi >= FA_TQ) continue;
    if (o && !pieces)
#pragma unroll
      for (int j = 0; j < FA_DV / 8; ++j)
        store2(ob0 + (long long)qi * FA_OUT_RS + 8 * j + 2 * t4, acc[j][2 * h] * inv, acc[j][2 * h + 1] * inv);
    if (lse && t4 == 0) lse[ob + qi] = sum == 0.f ? FA_NEG_INF : (m[h] * FA_SCALE_LOG2 + __log2f(sum)) * LN2;
  }
}

}  // namespace fa

// ---- forward: o = softmax(q k^T scale) v, lse ----
__device__ __forceinline__ void fa_forward(const fa_t* __restrict__ q, const fa_t* __restrict__ k,
                                           const fa_t* __restrict__ v, fa_t* __restrict__ o, float* __restrict__ lse) {
  using namespace fa;
  extern __shared__ float4 fa_smem4[];
  char* smem = reinterpret_cast<char*>(fa_smem4);  // arrays at the generator's offsets (FA_SMEM_*)
  fa_t* Qs = reinterpret_cast<fa_t*>(smem + FA_SMEM_FWD_Q);  // [BR][LD]
  fa_t* Ks = reinterpret_cast<fa_t*>(smem + FA_SMEM_FWD_K);  // [2][BC][LD]
  fa_t* Vs = reinterpret_cast<fa_t*>(smem + FA_SMEM_FWD_V);  // [2][BC][LDV]
  const int warp = threadIdx.x >> 5;
  // Blocks start in order of blockIdx.x (the batch index) fastest, so taking query tile
  // (tiles - 1 - y) starts the longest causal rows of every head first.
  const int z = blockIdx.x, q0 = (gridDim.y - 1 - blockIdx.y) * BR;
  q += fa_q_batch(z);
  k += fa_k_batch(z);
  v += fa_v_batch(z);
  const int tiles = keyTiles<BR, BC>(q0);  // attention_common.cuh
  loadTile<BR, FA_D>(Qs, q, FA_Q_RS, q0, FA_TQ);
  if (tiles > 0) {
    loadTile<BC, FA_D>(Ks, k, FA_K_RS, 0, FA_TK);
    loadTile<BC, FA_DV>(Vs, v, FA_V_RS, 0, FA_TK);
  }
  cpCommit();
  // Rows g and g + 8 of the warp's 16: m the running max of the raw scores, l this thread's
  // partial sum.
  float m[2] = {FA_NEG_INF, FA_NEG_INF}, l[2] = {0.f, 0.f};
  float acc[FA_DV / 8][4];
  zero(acc);
#if FA_QREG
  FragA qa[FA_D / KS];  // the warp's Q rows as A fragments, read once
  cpWait<0>();
  __syncthreads();
  loadA<FA_D, LD>(qa, Qs + warp * 16 * LD);
#else
  const FragA* qa = nullptr;  // read from shared per tile: fewer live registers
#endif
  for (int t = 0; t < tiles; ++t) {
    const int k0 = t * BC, buf = t & 1;
    if (t + 1 < tiles) {
      loadTile<BC, FA_D>(Ks + (buf ^ 1) * BC * LD, k, FA_K_RS, k0 + BC, FA_TK);
      loadTile<BC, FA_DV>(Vs + (buf ^ 1) * BC * LDV, v, FA_V_RS, k0 + BC, FA_TK);
    }
    cpCommit();  // possibly empty, so that wait_group 1 always means "tile t is in"
    cpWait<1>();
    __syncthreads();
    forwardTile(acc, m, l, qa, Qs + warp * 16 * LD, Ks + buf * BC * LD, Vs + buf * BC * LDV,
                needsMask<BR, BC>(q0, k0), q0 + warp * 16, k0);
    __syncthreads();  // this buffer is refilled by the next iteration's prefetch
  }
  cpWait<0>();  // no copy in flight at exit (no key tile: the Q tile's)
  storeForward(acc, m, l, o, lse, z, q0 + warp * 16);
}

#if FA_SHORT_FWD
// ---- forward in one launch for short sequences: a block per batch index ----
// (attention_kernel.cpp, Target::shortForwardMaxSeq: bf16, d and dv <= 64, one key/value head a
// query head.) q, k and v sit whole in shared memory, copied once (at 256 rows and d 64, 110 KB:
// two blocks an SM, so one block's copies and stores overlap the other's products), and each
// of the FA_WARPS warps takes two 16-row query strips, w and S - 1 - w of the S = 2 FA_WARPS:
// under a causal mask their key tiles add up to the same count for every warp. Each strip is
// the mma forward's loop over resident key tiles, with the same products, softmax and stores,
// so the results are that kernel's bit for bit (FusedAttention.ShortForwardEqualsTiled).
__device__ __forceinline__ void fa_forward_short(const fa_t* __restrict__ q, const fa_t* __restrict__ k,
                                                 const fa_t* __restrict__ v, fa_t* __restrict__ o, float* __restrict__ lse) {
  using namespace fa;
  constexpr int SR = 32 * FA_WARPS, S = SR / 16;  // the block's rows, its 16-row strips
  static_assert(SR >= FA_TQ && SR >= FA_TK && SR % BC == 0, "every row resident, whole key tiles");
  extern __shared__ float4 fa_smem4[];
  char* smem = reinterpret_cast<char*>(fa_smem4);  // arrays at the generator's offsets (FA_SMEM_*)
  fa_t* Qs = reinterpret_cast<fa_t*>(smem + FA_SMEM_SHORT_FWD_Q);  // [SR][LD]
  fa_t* Ks = reinterpret_cast<fa_t*>(smem + FA_SMEM_SHORT_FWD_K);  // [SR][LD]
  fa_t* Vs = reinterpret_cast<fa_t*>(smem + FA_SMEM_SHORT_FWD_V);  // [SR][LDV]
  const int warp = threadIdx.x >> 5, z = blockIdx.x;
  loadTile<SR, FA_D>(Qs, q + fa_q_batch(z), FA_Q_RS, 0, FA_TQ);
  loadTile<SR, FA_D>(Ks, k + fa_k_batch(z), FA_K_RS, 0, FA_TK);
  loadTile<SR, FA_DV>(Vs, v + fa_v_batch(z), FA_V_RS, 0, FA_TK);
  cpCommit();
  cpWait<0>();
  __syncthreads();
  for (int half = 0; half < 2; ++half) {
    const int r0 = 16 * (half ? S - 1 - warp : warp);
    if (r0 >= FA_TQ) continue;  // uniform per warp
    float m[2] = {FA_NEG_INF, FA_NEG_INF}, l[2] = {0.f, 0.f};
    float acc[FA_DV / 8][4];
    zero(acc);
#if FA_QREG
    FragA qa[FA_D / KS];
    loadA<FA_D, LD>(qa, Qs + r0 * LD);
#else
    const FragA* qa = nullptr;
#endif
    const int tiles = keyTiles<16, BC>(r0);  // attention_common.cuh
    for (int t = 0; t < tiles; ++t) {
      const int k0 = t * BC;
      forwardTile(acc, m, l, qa, Qs + r0 * LD, Ks + k0 * LD, Vs + k0 * LDV, needsMask<16, BC>(r0, k0), r0, k0);
    }
    storeForward(acc, m, l, o, lse, z, r0);
  }
}
#endif  // FA_SHORT_FWD

#else  // FA_BACKWARD
// ---- backward, pass 1: dq for a block of BR query rows ----
__device__ __forceinline__ void fa_backward_dq(const fa_t* __restrict__ q, const fa_t* __restrict__ k,
                                               const fa_t* __restrict__ v, const fa_t* __restrict__ o,
                                               const fa_t* __restrict__ dO, const float* __restrict__ lse,
                                               fa_t* __restrict__ dq, fa::FaRope rope = {}) {
  using namespace fa;
  extern __shared__ float4 fa_smem4[];
  char* smem = reinterpret_cast<char*>(fa_smem4);  // arrays at the generator's offsets (FA_SMEM_*)
  fa_t* Qs = reinterpret_cast<fa_t*>(smem + FA_SMEM_DQ_Q);  // [BR][LD]
  fa_t* Gs = reinterpret_cast<fa_t*>(smem + FA_SMEM_DQ_G);  // dO: [BR][LDV]
#if FA_DQ_OTILE
  fa_t* Os = reinterpret_cast<fa_t*>(smem + FA_SMEM_DQ_O);  // o: [BR][LDV]
#endif
  fa_t* Ks = reinterpret_cast<fa_t*>(smem + FA_SMEM_DQ_K);  // [2][BC][LD]
  fa_t* Vs = reinterpret_cast<fa_t*>(smem + FA_SMEM_DQ_V);  // [2][BC][LDV]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
  const int z = blockIdx.x, q0 = (gridDim.y - 1 - blockIdx.y) * BR;  // longest first, as the forward
  float2* stats;
  if (!dqOperands<BR>(z, q0, q, k, v, o, dO, lse, stats, dq)) return;
  const int tiles = keyTiles<BR, BC>(q0);  // attention_common.cuh
  loadTile<BR, FA_D>(Qs, q, FA_Q_RS, q0, FA_TQ);
  loadTile<BR, FA_DV>(Gs, dO, FA_DO_RS, q0, FA_TQ);
#if FA_DQ_OTILE
  loadTile<BR, FA_DV>(Os, o, FA_O_RS, q0, FA_TQ);
#endif
  if (tiles > 0) {
    loadTile<BC, FA_D>(Ks, k, FA_K_RS, 0, FA_TK);
    loadTile<BC, FA_DV>(Vs, v, FA_V_RS, 0, FA_TK);
  }
  cpCommit();
  float Dr[2], L2r[2];
#if FA_DQ_OTILE
  const int rw = q0 + warp * 16;  // the warp's first row
  // The row statistics are summed from the o and dO tiles once they land (the first tile's
  // wait), warp by warp: no block-wide wait on a global load. The lse of the lane's row
  // (two lanes a row) is loaded now and used then.
  const float l2 = rw + (lane >> 1) < FA_TQ ? lse[rw + (lane >> 1)] * LOG2E : 0.f;
  if (tiles == 0) {  // no key: the statistics still feed dK/dV's masked tiles
    cpWait<0>();
    __syncthreads();
    warpRowStats(Dr, L2r, Os + warp * 16 * LDV, Gs + warp * 16 * LDV, l2, stats, rw);
  }
#else
  float* Dsm = reinterpret_cast<float*>(smem + FA_SMEM_DQ_D);    // [BR]
  float* L2sm = reinterpret_cast<float*>(smem + FA_SMEM_DQ_L2);  // [BR]
  rowStats<BR>(Dsm, L2sm, stats, o, dO, lse, q0);  // overlaps the tiles' copies
  __syncthreads();
#pragma unroll
  for (int h = 0; h < 2; ++h) Dr[h] = Dsm[warp * 16 + g + 8 * h], L2r[h] = L2sm[warp * 16 + g + 8 * h];
#endif
  float acc[FA_D / 8][4];
  zero(acc);
  for (int t = 0; t < tiles; ++t) {
    const int k0 = t * BC, buf = t & 1;
    if (t + 1 < tiles) {
      loadTile<BC, FA_D>(Ks + (buf ^ 1) * BC * LD, k, FA_K_RS, k0 + BC, FA_TK);
      loadTile<BC, FA_DV>(Vs + (buf ^ 1) * BC * LDV, v, FA_V_RS, k0 + BC, FA_TK);
    }
    cpCommit();
    cpWait<1>();
    __syncthreads();
#if FA_DQ_OTILE
    if (t == 0) warpRowStats(Dr, L2r, Os + warp * 16 * LDV, Gs + warp * 16 * LDV, l2, stats, rw);
#endif
    float s[BC / 8][4], dp[BC / 8][4];
    zero(s);
    zero(dp);
    gemmABt<BC, FA_D, LD, LD>(s, nullptr, Qs + warp * 16 * LD, Ks + buf * BC * LD);
    gemmABt<BC, FA_DV, LDV, LDV>(dp, nullptr, Gs + warp * 16 * LDV, Vs + buf * BC * LDV);
    dsRows<BC>(s, dp, Dr, L2r, q0 + warp * 16 + g, k0, needsMask<BR, BC>(q0, k0));
    gemmPB<BC, FA_D, LD>(acc, s, Ks + buf * BC * LD);
    __syncthreads();
  }
  cpWait<0>();
  storeRows<FA_D, FA_DQ_OUT_RS>(dq + fa_dq_out(z), acc, q0 + warp * 16, FA_TQ, FA_SCALE, rope.qc, rope.qs);
}

// ---- backward, pass 2: dk, dv for a block of BR key rows ----
// Query tiles of BQ rows (attention_kernel.cpp's mmaTiling: small enough above d 64 that the
// warp's dK and dV accumulators, 16 x d each, and its S^T, dP^T strips fit the register file
// without spilling, and smaller on short sequences, where causal diagonal tiles dominate).
__device__ __forceinline__ void fa_backward_dkdv(const fa_t* __restrict__ q, const fa_t* __restrict__ k,
                                                 const fa_t* __restrict__ v, const fa_t* __restrict__ o,
                                                 const fa_t* __restrict__ dO, const float* __restrict__ lse,
                                                 fa_t* __restrict__ dk, fa_t* __restrict__ dv, fa::FaRope rope = {}) {
  using namespace fa;
  extern __shared__ float4 fa_smem4[];
  char* smem = reinterpret_cast<char*>(fa_smem4);  // arrays at the generator's offsets (FA_SMEM_*)
  fa_t* Ks = reinterpret_cast<fa_t*>(smem + FA_SMEM_DKDV_K);      // [BR][LD]
  fa_t* Vs = reinterpret_cast<fa_t*>(smem + FA_SMEM_DKDV_V);      // [BR][LDV]
  fa_t* Qs = reinterpret_cast<fa_t*>(smem + FA_SMEM_DKDV_Q);      // [2][BQ][LD]
  fa_t* Gs = reinterpret_cast<fa_t*>(smem + FA_SMEM_DKDV_G);      // dO: [2][BQ][LDV]
  float2* RS = reinterpret_cast<float2*>(smem + FA_SMEM_DKDV_RS);  // {D, L2}: [2][BQ]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
  // z is the key/value batch index; grouped-query attention's FA_GROUP query heads
  // z * FA_GROUP .. + FA_GROUP - 1 read it, and their contributions to dK, dV add up here, in
  // registers, in a fixed order (no atomics).
  const int z = blockIdx.x, k0 = blockIdx.y * BR;  // causal: the first key rows have the most work
  k += fa_k_batch(z * FA_GROUP);
  v += fa_v_batch(z * FA_GROUP);
  // Step `it`'s operands: q, dO and the row statistics (the dQ pass's), all asynchronous so the
  // loop never waits on a global load of its own.
  const QueryWalk walk(k0);
  const int steps = walk.steps;
  auto loadQueryTile = [&](int b, int it) {
    const int zq = walk.head(z, it), q0 = walk.q0(it);
    loadTile<BQ, FA_D>(Qs + b * BQ * LD, q + fa_q_batch(zq), FA_Q_RS, q0, FA_TQ);
    loadTile<BQ, FA_DV>(Gs + b * BQ * LDV, dO + fa_do_batch(zq), FA_DO_RS, q0, FA_TQ);
    loadRowStats<BQ>(RS + b * BQ, fa_rowstats + (long long)zq * FA_TQ, q0);
  };
  loadTile<BR, FA_D>(Ks, k, FA_K_RS, k0, FA_TK);
  loadTile<BR, FA_DV>(Vs, v, FA_V_RS, k0, FA_TK);
  if (steps > 0) loadQueryTile(0, 0);
  cpCommit();
  float gk[FA_D / 8][4], gv[FA_DV / 8][4];
  zero(gk);
  zero(gv);
  const int kw = k0 + warp * 16 + g;  // this thread's key rows: kw, kw + 8
  for (int it = 0; it < steps; ++it) {
    const int q0 = walk.q0(it), buf = it & 1;
    if (it + 1 < steps) loadQueryTile(buf ^ 1, it + 1);
    cpCommit();
    cpWait<1>();
    __syncthreads();
    float s[BQ / 8][4], dp[BQ / 8][4];  // S^T, dP^T: rows keys, columns queries
    zero(s);
    zero(dp);
    gemmABt<BQ, FA_D, LD, LD>(s, nullptr, Ks + warp * 16 * LD, Qs + buf * BQ * LD);
    gemmABt<BQ, FA_DV, LDV, LDV>(dp, nullptr, Vs + warp * 16 * LDV, Gs + buf * BQ * LDV);
    dsTransposed<BQ>(s, dp, RS + buf * BQ, q0, kw, needsMask<BQ, BR>(q0, k0));
    gemmPB<BQ, FA_DV, LDV>(gv, s, Gs + buf * BQ * LDV);
    gemmPB<BQ, FA_D, LD>(gk, dp, Qs + buf * BQ * LD);
    __syncthreads();
  }
  cpWait<0>();
  // dV first: its accumulators are free by the time dK's (rotated) stores need registers.
  if (dv) storeRows<FA_DV, FA_DV_OUT_RS>(dv + fa_dv_out(z), gv, k0 + warp * 16, FA_TK, 1.f);
  if (dk) storeRows<FA_D, FA_DK_OUT_RS>(dk + fa_dk_out(z), gk, k0 + warp * 16, FA_TK, FA_SCALE, rope.kc, rope.ks);
}

#if FA_SHORT
// ---- backward in one launch for short sequences: a block per batch index ----
// The block's rows cover every query and every key (the generator rounds the longer length
// up to whole BQ and BC tiles: BR rows), and q, dO, k and v sit in shared memory whole, copied
// once, beside every query row's statistics. Two forms:
//   * (FA_SHORT_DS 0) warp w does, with no block-wide wait, the dK/dV pass's work for key rows
//     [16w, 16w + 16) (every query tile that sees them) and the dQ pass's for query rows
//     [16w, 16w + 16) (every key tile they see); under a causal mask the first shrinks with w
//     as the second grows, so every warp has about the same work. The products, their order
//     and the row statistics' sums are those of the two passes (dQ's key tiles are BC = BQ
//     here, but each sums into the same accumulators k16 chunk after chunk), so the results
//     are bit for bit theirs (FusedAttention.ShortBackwardEqualsTwoPasses).
//   * (FA_SHORT_DS 1) dQ from dS kept in shared memory (below).
// Against the two launches either reads each operand once instead of once per tile pair's
// block, computes the row statistics in the same launch, and pays one launch's prologue.
// attention_kernel.cpp picks it for bf16 attention of one key/value head a query head, d <= 64,
// up to Target::shortBackwardMaxSeq rows. (Two blocks a head, each holding one side whole and
// half of the other, measured slower and were taken out: bench/RESULTS.md.)
namespace fa {
// One query tile of the dK/dV work of the warp's key rows [k0, k0 + 16), every operand resident
// (row r of q at Qs + r LD; dO, k, v likewise): S^T and dP^T against queries [q0, q0 + BQ),
// then dV += P^T dO and dK += dS^T Q. Leaves dS^T / scale in ds, rounded to bf16 once as dK's
// A fragments (rows keys, columns queries), which the form with dS kept also stores.
__device__ __forceinline__ void shortKeyTile(float (&gk)[FA_D / 8][4], float (&gv)[FA_DV / 8][4], FragA (&ds)[BQ / 16],
                                             const fa_t* Qs, const fa_t* Gs, const fa_t* Ks, const fa_t* Vs,
                                             const float2* RS, int k0, int q0) {
  const int g = (threadIdx.x & 31) >> 2;
  float s[BQ / 8][4], dp[BQ / 8][4];  // S^T, then P^T; dP^T, then dS^T / scale
  zero(s);
  zero(dp);
  gemmABt<BQ, FA_D, LD, LD>(s, nullptr, Ks + k0 * LD, Qs + q0 * LD);
  gemmABt<BQ, FA_DV, LDV, LDV>(dp, nullptr, Vs + k0 * LDV, Gs + q0 * LDV);
  dsTransposed<BQ>(s, dp, RS + q0, q0, k0 + g, needsMask<BQ, 16>(q0, k0));
  gemmPB<BQ, FA_DV, LDV>(gv, s, Gs + q0 * LDV);
  packA<BQ>(ds, dp);
  gemmFB<BQ, FA_D, LD>(gk, ds, Qs + q0 * LD);
}

// The one launch's shared arrays (attention_smem.cpp shortBackwardSmemLayout): q, dO, k and v
// whole ([BR][LD], dO and v [BR][LDV]) and every query row's {D, L2}; batch index z's rows
// copied in, then its statistics summed from o (loaded ahead of the copies) and the copied dO,
// each followed by a block-wide wait.
struct ShortSmem {
  fa_t *Qs, *Gs, *Ks, *Vs;
  float2* RS;
};
__device__ __forceinline__ ShortSmem shortLoad(char* smem, int z, cptr& q, cptr& k, cptr& v, cptr& o, cptr& dO,
                                               const float* __restrict__& lse) {
  static_assert(BR % BQ == 0 && BR % BC == 0, "whole tiles: a warp's last tile stays inside the block's rows");
  const ShortSmem m{reinterpret_cast<fa_t*>(smem + FA_SMEM_SHORT_Q), reinterpret_cast<fa_t*>(smem + FA_SMEM_SHORT_G),
                    reinterpret_cast<fa_t*>(smem + FA_SMEM_SHORT_K), reinterpret_cast<fa_t*>(smem + FA_SMEM_SHORT_V),
                    reinterpret_cast<float2*>(smem + FA_SMEM_SHORT_RS)};
  backwardOperands(z, q, k, v, o, dO, lse);
  // The row statistics' o pieces and lse go to registers ahead of the copies; D then takes dO
  // from shared memory after them (RowPieces: rowStats' pieces and order, the same bits), so
  // dO is read from global memory once, not twice.
  constexpr int TPR = NT / BR;
  const int r = threadIdx.x / TPR, part = threadIdx.x % TPR;
  RowPieces<TPR> pieces;
  float l2 = 0.f;
  if (r < FA_TQ) {
    pieces.load(o + (long long)r * FA_O_RS, part);
    l2 = lse[r] * LOG2E;
  }
  loadTile<BR, FA_D>(m.Qs, q, FA_Q_RS, 0, FA_TQ);
  loadTile<BR, FA_DV>(m.Gs, dO, FA_DO_RS, 0, FA_TQ);
  loadTile<BR, FA_D>(m.Ks, k, FA_K_RS, 0, FA_TK);
  loadTile<BR, FA_DV>(m.Vs, v, FA_V_RS, 0, FA_TK);
  cpCommit();
  cpWait<0>();
  __syncthreads();
  const float s = rowSum<TPR>(r < FA_TQ ? pieces.dot(m.Gs + r * LDV, part) : 0.f);
  if (part == 0) m.RS[r] = make_float2(s, l2);
  __syncthreads();
  return m;
}

__device__ __forceinline__ void backwardShort(const fa_t* __restrict__ q, const fa_t* __restrict__ k,
                                              const fa_t* __restrict__ v, const fa_t* __restrict__ o,
                                              const fa_t* __restrict__ dO, const float* __restrict__ lse,
                                              fa_t* __restrict__ dq, fa_t* __restrict__ dk, fa_t* __restrict__ dv,
                                              FaRope rope) {
  extern __shared__ float4 fa_smem4[];
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, z = blockIdx.x;
  const ShortSmem m = shortLoad(reinterpret_cast<char*>(fa_smem4), z, q, k, v, o, dO, lse);
  fa_t *const Qs = m.Qs, *const Gs = m.Gs, *const Ks = m.Ks, *const Vs = m.Vs;
  const float2* const RS = m.RS;
  // dK, dV of key rows [k0, k0 + 16): the dK/dV pass's loop with every query tile resident.
  const int k0 = warp * 16;
  if ((dk || dv) && k0 < FA_TK) {
    float gk[FA_D / 8][4], gv[FA_DV / 8][4];
    zero(gk);
    zero(gv);
    const int first = FA_CAUSAL ? max(0, k0 - (FA_TK - FA_TQ)) / BQ * BQ : 0;
    for (int q0 = first; q0 < FA_TQ; q0 += BQ) {
      FragA ds[BQ / 16];
      shortKeyTile(gk, gv, ds, Qs, Gs, Ks, Vs, RS, k0, q0);
    }
    if (dv) storeRows<FA_DV, FA_DV_OUT_RS>(dv + fa_dv_out(z), gv, k0, FA_TK, 1.f);
    if (dk) storeRows<FA_D, FA_DK_OUT_RS>(dk + fa_dk_out(z), gk, k0, FA_TK, FA_SCALE, rope.kc, rope.ks);
  }
  // dQ of query rows [q0, q0 + 16): the dQ pass's loop with every key tile resident.
  const int q0 = warp * 16;
  if (dq && q0 < FA_TQ) {
    float Dr[2], L2r[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float2 st = RS[q0 + g + 8 * h];
      Dr[h] = st.x, L2r[h] = st.y;
    }
    float acc[FA_D / 8][4];
    zero(acc);
    // The warp's q and dO rows are the A operand of every key tile's two products: read from
    // shared memory once (a quarter of this part's ldmatrix traffic) instead of once a tile.
    FragA qa[FA_D / KS], ga[FA_DV / KS];
    loadA<FA_D, LD>(qa, Qs + q0 * LD);
    loadA<FA_DV, LDV>(ga, Gs + q0 * LDV);
    const int tiles = keyTiles<16, BC>(q0);  // attention_common.cuh
    for (int t = 0; t < tiles; ++t) {
      const int kt = t * BC;
      float s[BC / 8][4], dp[BC / 8][4];
      zero(s);
      zero(dp);
      gemmABt<BC, FA_D, LD, LD>(s, qa, Qs + q0 * LD, Ks + kt * LD);
      gemmABt<BC, FA_DV, LDV, LDV>(dp, ga, Gs + q0 * LDV, Vs + kt * LDV);
      dsRows<BC>(s, dp, Dr, L2r, q0 + g, kt, needsMask<16, BC>(q0, kt));
      gemmPB<BC, FA_D, LD>(acc, s, Ks + kt * LD);
    }
    storeRows<FA_D, FA_DQ_OUT_RS>(dq + fa_dq_out(z), acc, q0, FA_TQ, FA_SCALE, rope.qc, rope.qs);
  }
}
}  // namespace fa

#if FA_SHORT_DS
// FA_SHORT_DS (causal self-attention, d = dv; Target::shortBackwardDs): dQ from
// dS kept in shared memory instead of S and dP computed a second time. The dK/dV part stores
// each tile's dS^T (rounded to bf16, the values its dK product takes) into shared memory; after
// one block-wide wait, dQ = dS K is a product of those tiles and k alone: a third of the dQ
// part's tensor-core work and none of its exponentials. What that leaves per key row is the
// dK/dV part, whose causal work falls with the row, so the warps are paired to even it out:
// warps 2p and 2p + 1 share key strips p and S - 1 - p (16 rows each; S = BR / 16) and query
// strips p and S - 1 - p. Under the causal mask a key strip pair has T + 1 query tiles (T =
// BR / BQ) and a query strip pair S + 1 key strips, split about evenly; the warp that
// finishes a strip adds the other's partial sums, handed over in shared memory, in a fixed
// order, so results are deterministic (not those of the two passes bit for bit: the sums split
// at other places, and dQ's dS comes from S^T). The row statistics and loads are the one-block
// form's.
namespace fa {
constexpr int DS_S = BR / 16, DS_T = BR / BQ, DS_M = BQ / 16;  // strips, query tiles, strips a tile
// Key strip w's first stored query (the causal walk's first tile), its row pitch (its queries
// to BR, plus the 16-byte pad that keeps ldmatrix phases on distinct banks) and where its 16
// rows start in the DS array (elements): strip after strip, the lower triangle only.
__host__ __device__ constexpr int dsFirst(int w) { return w / DS_M * BQ; }
__host__ __device__ constexpr int dsPitch(int w) { return BR - dsFirst(w) + PAD; }
__host__ __device__ constexpr int dsOffset(int w) {
  // sum over i < w of 16 dsPitch(i); with w = a DS_M + b, sum floor(i / DS_M) = DS_M a (a - 1) / 2 + b a
  return 16 * (w * (BR + PAD) - BQ * (DS_M * (w / DS_M) * (w / DS_M - 1) / 2 + (w % DS_M) * (w / DS_M)));
}
__host__ __device__ constexpr int dsTiles(int w) { return DS_T - w / DS_M; }  // key strip w's query tiles
// The even warp of a pair takes the first DS_A_TILES of key strip p's tiles and the first
// DS_A_KEYS key strips of query strip S - 1 - p; the odd warp the rest and both other strips.
constexpr int DS_A_TILES = (DS_T + 2) / 2, DS_A_KEYS = DS_S / 2;
__host__ __device__ constexpr bool dsPairsEven() {
  for (int p = 0; p < DS_S / 2; ++p)
    if (dsTiles(p) + dsTiles(DS_S - 1 - p) != DS_T + 1 || dsTiles(p) < DS_A_TILES) return false;
  return DS_S % 2 == 0;
}
static_assert(dsPairsEven(), "every pair of key strips has T + 1 query tiles, the even warp's share inside strip p");
static_assert(FA_SMEM_SHORT_DS + dsOffset(DS_S) * (int)sizeof(fa_t) <= FA_SMEM_SHORT_END, "the generator's DS array");

// The warp's dS^T / scale tile (its 16 key rows x BQ queries, as dK's packed A fragments) at
// column `col` of its strip: fragment kc's a0 / a2 hold row g's columns 16 kc + 2 t4 and + 8,
// a1 / a3 row g + 8's.
__device__ __forceinline__ void storeDs(fa_t* strip, int pitch, const FragA (&ds)[BQ / 16], int col) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int j = 0; j < BQ / 8; ++j) {
    fa_t* at = strip + g * pitch + col + 8 * j + 2 * t4;
    *reinterpret_cast<unsigned*>(at) = ds[j / 2].r[2 * (j & 1)];
    *reinterpret_cast<unsigned*>(at + 8 * pitch) = ds[j / 2].r[2 * (j & 1) + 1];
  }
}

// dQ (the 16 query rows from q0, 16 x d) += dS (those rows x key strip ks) k (strip ks's rows):
// dS is read transposed from the stored dS^T (ldmatrix.trans: matrix i holds key rows
// 8 (i >> 1) .. and query columns 8 (i & 1) .., the A fragment's a0 .. a3).
__device__ __forceinline__ void dqFromDs(float (&acc)[FA_D / 8][4], const fa_t* DS, const fa_t* Ks, int ks, int q0) {
  const int lane = threadIdx.x & 31, pitch = dsPitch(ks);
  const fa_t* t = DS + dsOffset(ks) + (q0 - dsFirst(ks));
  unsigned r[4];
  ldsm4t(r, t + ((lane & 7) + ((lane >> 4) << 3)) * pitch + ((lane >> 3) & 1) * 8);
  mmaAB<FA_D, LD>(acc, fragA(r), Ks + ks * 16 * LD);
}

// A warp's 16 x W accumulator handed to the other warp of its pair: lane by lane in 16-byte
// pieces (no bank conflict), then added in by the receiver.
template <int W>
__device__ __forceinline__ void putPartial(float4* slot, const float (&acc)[W / 8][4]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < W / 8; ++j) slot[j * 32 + lane] = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
}
template <int W>
__device__ __forceinline__ void addPartial(float (&acc)[W / 8][4], const float4* slot) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < W / 8; ++j) {
    const float4 x = slot[j * 32 + lane];
    acc[j][0] += x.x, acc[j][1] += x.y, acc[j][2] += x.z, acc[j][3] += x.w;
  }
}
// The two warps of pair p (barrier 1 + p; 0 is __syncthreads').
__device__ __forceinline__ void pairBarrier(int p) { asm volatile("bar.sync %0, 64;\n" ::"r"(p + 1) : "memory"); }

__device__ __forceinline__ void backwardShortDs(const fa_t* __restrict__ q, const fa_t* __restrict__ k,
                                                const fa_t* __restrict__ v, const fa_t* __restrict__ o,
                                                const fa_t* __restrict__ dO, const float* __restrict__ lse,
                                                fa_t* __restrict__ dq, fa_t* __restrict__ dk, fa_t* __restrict__ dv,
                                                FaRope rope) {
  static_assert(FA_CAUSAL && FA_TQ == FA_TK && FA_D == FA_DV && !FA_TF32,
                "dS in shared memory: bf16 causal self-attention, d = dv");
  extern __shared__ float4 fa_smem4[];
  char* smem = reinterpret_cast<char*>(fa_smem4);  // arrays at the generator's offsets (FA_SMEM_*)
  fa_t* DS = reinterpret_cast<fa_t*>(smem + FA_SMEM_SHORT_DS);  // dS^T / scale, key strip after strip
  const int warp = threadIdx.x >> 5, p = warp >> 1, z = blockIdx.x;
  const bool odd = warp & 1;
  const int low = p, high = DS_S - 1 - p;  // the pair's strips
  const ShortSmem m = shortLoad(smem, z, q, k, v, o, dO, lse);
  fa_t *const Qs = m.Qs, *const Gs = m.Gs, *const Ks = m.Ks, *const Vs = m.Vs;  // q and dO, v: the partials' space later
  const float2* const RS = m.RS;
  // dK, dV: key strip w's query tiles [t0, t1) into gk, gv, each tile's dS^T kept.
  float gk[FA_D / 8][4], gv[FA_DV / 8][4];
  auto keyTiles = [&](int w, int t0, int t1) {
    for (int t = t0; t < t1; ++t) {
      FragA ds[BQ / 16];
      shortKeyTile(gk, gv, ds, Qs, Gs, Ks, Vs, RS, 16 * w, t * BQ);
      storeDs(DS + dsOffset(w), dsPitch(w), ds, t * BQ - dsFirst(w));
    }
  };
  auto storeKeyGrads = [&](int w) {
    if (dv) storeRows<FA_DV, FA_DV_OUT_RS>(dv + fa_dv_out(z), gv, 16 * w, FA_TK, 1.f);
    if (dk) storeRows<FA_D, FA_DK_OUT_RS>(dk + fa_dk_out(z), gk, 16 * w, FA_TK, FA_SCALE, rope.kc, rope.ks);
  };
  const int split = dsFirst(low) / BQ + DS_A_TILES;  // strip `low`'s first tile of the odd warp
  zero(gk);
  zero(gv);
  if (!odd) {
    keyTiles(low, dsFirst(low) / BQ, split);
  } else {
    keyTiles(high, dsFirst(high) / BQ, DS_T);
    storeKeyGrads(high);
    zero(gk);
    zero(gv);
    keyTiles(low, split, DS_T);
  }
  __syncthreads();  // every dS^T tile stored; q, dO and v read for the last time: their space takes the partials
  float4* slotK = reinterpret_cast<float4*>(Qs) + p * (FA_D / 8) * 32;
  float4* slotV = reinterpret_cast<float4*>(Gs) + p * (FA_DV / 8) * 32;
  float4* slotQ = reinterpret_cast<float4*>(Vs) + p * (FA_D / 8) * 32;
  if (odd) putPartial<FA_D>(slotK, gk), putPartial<FA_DV>(slotV, gv);
  pairBarrier(p);
  if (!odd) {
    addPartial<FA_D>(gk, slotK);
    addPartial<FA_DV>(gv, slotV);
    storeKeyGrads(low);
  }
  if (!dq) return;
  // dQ: query strip `low` (keys [0, 16 low + 16)) and strip `high`'s keys split at DS_A_KEYS.
  float acc[FA_D / 8][4];
  zero(acc);
  if (!odd) {
    for (int ks = 0; ks < DS_A_KEYS; ++ks) dqFromDs(acc, DS, Ks, ks, 16 * high);
    putPartial<FA_D>(slotQ, acc);
    pairBarrier(p);
  } else {
    for (int ks = 0; ks <= low; ++ks) dqFromDs(acc, DS, Ks, ks, 16 * low);
    storeRows<FA_D, FA_DQ_OUT_RS>(dq + fa_dq_out(z), acc, 16 * low, FA_TQ, FA_SCALE, rope.qc, rope.qs);
    zero(acc);
    for (int ks = DS_A_KEYS; ks <= high; ++ks) dqFromDs(acc, DS, Ks, ks, 16 * high);
    pairBarrier(p);
    addPartial<FA_D>(acc, slotQ);
    storeRows<FA_D, FA_DQ_OUT_RS>(dq + fa_dq_out(z), acc, 16 * high, FA_TQ, FA_SCALE, rope.qc, rope.qs);
  }
}
}  // namespace fa
#endif  // FA_SHORT_DS

__device__ __forceinline__ void fa_backward_short(const fa_t* __restrict__ q, const fa_t* __restrict__ k,
                                                  const fa_t* __restrict__ v, const fa_t* __restrict__ o,
                                                  const fa_t* __restrict__ dO, const float* __restrict__ lse,
                                                  fa_t* __restrict__ dq, fa_t* __restrict__ dk, fa_t* __restrict__ dv,
                                                  fa::FaRope rope = {}) {
#if FA_SHORT_DS
  fa::backwardShortDs(q, k, v, o, dO, lse, dq, dk, dv, rope);
#else
  fa::backwardShort(q, k, v, o, dO, lse, dq, dk, dv, rope);
#endif
}
#endif  // FA_SHORT
#endif  // FA_BACKWARD
