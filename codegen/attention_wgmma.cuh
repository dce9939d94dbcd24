// The bf16 flash-attention forward on Hopper's warpgroup MMA (wgmma, sm_90a): the same entry
// arguments, constants and results as attention_mma.cuh's fa_forward, whose text (and so its
// helpers: tile copies, the online softmax, the stores) precedes this one in a kernel's
// source; codegen/attention_kernel.cpp chooses it for bf16 with d = dv of 64 or 128 on a
// device with wgmma (Target::hasWgmma).
//
// A block is FA_WARPS / 4 warpgroups of 64 query rows each (BR rows) and walks the key tiles
// (BC keys) through shared memory, double-buffered with cp.async. Per tile each warpgroup
// issues S = Q K^T as d / 16 wgmma steps with both operands read from shared memory by the
// tensor cores (no ldmatrix, no operand registers), runs the online softmax on S in registers
// (an m64nN wgmma accumulator is, per warp, mma.sync's m16n8 accumulators side by side, so
// the mma forward's softmaxTile serves as it is), and issues O += P V with P packed to bf16 A
// fragments in registers (mma.sync's m16k16 layout again) and V read from shared memory
// transposed. The product with V lags a tile behind (FlashAttention-3's intra-warpgroup
// pipelining): iteration t issues S_t = Q K_t^T and then O += P_t-1 V_t-1, and the softmax
// of S_t runs on the CUDA cores while the tensor cores still do the second product.
//
// Shared tiles are stored the way wgmma reads them without bank conflicts, the 128-byte
// swizzle: a tile of R rows x W bf16 is W / 64 column blocks of R rows x 128 bytes, each row's
// eight 16-byte chunks permuted by chunk ^ (row % 8), every block on a 1024-byte boundary (the
// swizzle repeats every 8 rows; a descriptor's base offset field then stays 0). Descriptors
// (PTX ISA, "matrix descriptor"): start address, leading and stride byte offsets, all >> 4,
// and the swizzle mode in bits 62-63.
//   * K-major operands (Q and K: contiguous along the reduction dim d): the stride offset is
//     1024 bytes from one 8-row group to the next; the leading offset is unused with this
//     swizzle (one k16 step, 32 bytes, lies inside a 128-byte row); step kc of the reduction
//     starts at column block kc / 4, 32 (kc % 4) bytes in.
//   * V, the B operand of P V, is MN-major (contiguous along dv, the product's n): step kk
//     (keys 16 kk .. 16 kk + 15) starts 16 kk rows in; its 8-row groups are 1024 bytes apart
//     and its 64-wide column blocks BC x 128 bytes apart (which field holds which:
//     FA_WG_V_LBO and FA_WG_V_SBO below, measured by scripts/gpu-wgmma-probe.sh).
// ---- the text below is what the kernels' sources embed (cmake/embed_cuh.cmake) ----

namespace fa {
namespace wg {

__device__ __forceinline__ unsigned long long desc(unsigned addr, unsigned lbo, unsigned sbo) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
         ((unsigned long long)(sbo >> 4) << 32) | (1ull << 62);
}
// Byte offset of 16-byte chunk c of row r in a swizzled tile of R rows.
template <int R>
__device__ __forceinline__ int swizzled(int r, int c) {
  return (c >> 3) * R * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4);
}
// Step kc (16 of the reduction dim) of rows [r0, r0 + 64 or N) of a K-major tile of R rows.
template <int R>
__device__ __forceinline__ unsigned long long kMajor(unsigned tile, int r0, int kc) {
  return desc(tile + (kc >> 2) * R * 128 + r0 * 128 + (kc & 3) * 32, 16, 1024);
}
// Step kk (16 keys) of the MN-major V tile of BC keys: which descriptor field holds the
// 8-row stride and which the column-block stride, FA_WG_V_SWAP (scripts/gpu-wgmma-probe.sh).
#ifndef FA_WG_V_SWAP
#define FA_WG_V_SWAP 0
#endif
__device__ __forceinline__ unsigned long long mnMajor(unsigned tile, int kk) {
  return FA_WG_V_SWAP ? desc(tile + kk * 16 * 128, 1024, BC * 128) : desc(tile + kk * 16 * 128, BC * 128, 1024);
}

__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// Shared memory written by the generic proxy (cp.async, ordinary stores) and read next by the
// tensor cores' async proxy needs this in each writing thread before the barrier.
__device__ __forceinline__ void proxyFence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps the compiler from moving reads or writes of an accumulator across a wgmma issue or
// wait: the asm below "writes" every register, so nothing moves past it.
template <int N>
__device__ __forceinline__ void pin(float (&d)[N][4]) {
#pragma unroll
  for (int j = 0; j < N; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
}
// The same for A fragments in registers, which the tensor cores read until the wait: pinned
// after it, their registers are not reused before.
template <int N>
__device__ __forceinline__ void pin(unsigned (&a)[N][4]) {
#pragma unroll
  for (int j = 0; j < N; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[j][e])::"memory");
}

// d (64 x N, f32 accumulators) = (scale ? d : 0) + A B^T, A (64 x 16) and B (N x 16) K-major
// in shared memory. mmaRS: d += A B, A (64 x 16) in registers, B (16 x N) MN-major in shared
// memory. The operand lists are written out per N (PTX takes no register arrays).
__device__ __forceinline__ void mmaSS(float (&d)[8][4], unsigned long long a, unsigned long long b, int scale) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "l"(a), "l"(b), "r"(scale));
}
__device__ __forceinline__ void mmaRS(float (&d)[8][4], const unsigned (&a)[4], unsigned long long b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
__device__ __forceinline__ void mmaSS(float (&d)[16][4], unsigned long long a, unsigned long long b, int scale) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
      : "l"(a), "l"(b), "r"(scale));
}
__device__ __forceinline__ void mmaRS(float (&d)[16][4], const unsigned (&a)[4], unsigned long long b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// Rows [r0, r0 + R) of a [*, W] bf16 operand (row stride rs elements) into a swizzled tile,
// asynchronously; rows at or past `limit` are zeros.
template <int R, int W>
__device__ __forceinline__ void loadTile(fa_t* dst, const fa_t* src, long long rs, int r0, int limit) {
  constexpr int CPR = W / 8, N = R * CPR;  // 16-byte chunks per row, per tile
  char* d = reinterpret_cast<char*>(dst);
#pragma unroll
  for (int i = 0; i < (N + NT - 1) / NT; ++i) {
    const int e = threadIdx.x + i * NT;
    if (N % NT != 0 && e >= N) break;
    const int r = e / CPR, c = e % CPR, row = r0 + r;
    const bool ok = row < limit;
    cpAsync16(d + swizzled<R>(r, c), src + (long long)(ok ? row : 0) * rs + c * 8, ok);
  }
}

#if !FA_BACKWARD
// S (the warpgroup's 64 rows x BC keys) = Q K^T over d, from the Q tile at q (rows from wr)
// and the K tile at k: issued and committed as one group.
__device__ __forceinline__ void scores(float (&s)[BC / 8][4], unsigned q, unsigned k, int wr) {
#pragma unroll
  for (int kc = 0; kc < FA_D / 16; ++kc) mmaSS(s, kMajor<BR>(q, wr, kc), kMajor<BC>(k, 0, kc), kc);
  commit();
}
// acc += P V, P as A fragments (keys 16 kk .. 16 kk + 15), V the tile at v: one group.
__device__ __forceinline__ void product(float (&acc)[FA_DV / 8][4], const unsigned (&p)[BC / 16][4], unsigned v) {
#pragma unroll
  for (int kk = 0; kk < BC / 16; ++kk) mmaRS(acc, p[kk], mnMajor(v, kk));
  commit();
}
// P (the softmax's accumulator-layout tile) as bf16 A fragments: mma.sync's m16k16 layout,
// which an m16n8 accumulator pair is once packed.
__device__ __forceinline__ void packP(unsigned (&p)[BC / 16][4], const float (&s)[BC / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < BC / 16; ++kk) {
    p[kk][0] = pack(s[2 * kk][0], s[2 * kk][1]);
    p[kk][1] = pack(s[2 * kk][2], s[2 * kk][3]);
    p[kk][2] = pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    p[kk][3] = pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}
#endif  // !FA_BACKWARD

}  // namespace wg
}  // namespace fa

#if !FA_BACKWARD
// ---- forward on wgmma: o = softmax(q k^T scale) v, lse ----
__device__ __forceinline__ void fa_forward_wgmma(const fa_t* __restrict__ q, const fa_t* __restrict__ k,
                                                 const fa_t* __restrict__ v, fa_t* __restrict__ o,
                                                 float* __restrict__ lse) {
  using namespace fa;
  static_assert(FA_D == FA_DV && (FA_D == 64 || FA_D == 128), "the wgmma forward takes d = dv of 64 or 128");
  static_assert(BR % 64 == 0 && (BC == 64 || BC == 128), "warpgroups of 64 rows, key tiles of one wgmma's n");
  extern __shared__ float4 fa_smem4[];
  // Tiles on 1024-byte boundaries (the generator asks for 1 KB more than the tiles take).
  const unsigned raw = smemAddr(fa_smem4), pad = (1024u - (raw & 1023u)) & 1023u;
  fa_t* Qs = reinterpret_cast<fa_t*>(reinterpret_cast<char*>(fa_smem4) + pad);  // [BR][D] swizzled
  fa_t* Ks = Qs + BR * FA_D;                                                     // [2][BC][D]
  fa_t* Vs = Ks + 2 * BC * FA_D;                                                 // [2][BC][DV]
  const unsigned qAddr = smemAddr(Qs), kAddr = smemAddr(Ks), vAddr = smemAddr(Vs);
  const int warp = threadIdx.x >> 5, wr = (warp >> 2) * 64;  // the warpgroup's first row of BR
  const int z = blockIdx.x, q0 = (gridDim.y - 1 - blockIdx.y) * BR;  // longest causal rows first
  q += fa_q_batch(z);
  k += fa_k_batch(z);
  v += fa_v_batch(z);
  const int tiles = keyTiles<BR, BC>(q0);  // attention_common.cuh
  // Copy groups: {Q, K_0}, then {V_t, K_t+1} before the product of tile t: V lags K by one
  // tile, because iteration t multiplies Q K_t^T while the product with V_t-1 runs (below).
  wg::loadTile<BR, FA_D>(Qs, q, FA_Q_RS, q0, FA_TQ);
  if (tiles > 0) wg::loadTile<BC, FA_D>(Ks, k, FA_K_RS, 0, FA_TK);
  cpCommit();
  float m[2] = {FA_NEG_INF, FA_NEG_INF}, l[2] = {0.f, 0.f}, alpha[2];
  float acc[FA_DV / 8][4];
  zero(acc);
  float s[BC / 8][4];
  unsigned p[BC / 16][4];  // P of the previous tile as A fragments
  // V_t into buffer t & 1 (V_t-2's, whose product finished an iteration ago) and K_t+1 into
  // buffer (t + 1) & 1 (K_t-1's); then wait for K_t and V_t-1.
  auto copies = [&](int t) {
    wg::loadTile<BC, FA_DV>(Vs + (t & 1) * BC * FA_DV, v, FA_V_RS, t * BC, FA_TK);
    if (t + 1 < tiles) wg::loadTile<BC, FA_D>(Ks + ((t + 1) & 1) * BC * FA_D, k, FA_K_RS, (t + 1) * BC, FA_TK);
    cpCommit();
    cpWait<1>();
    wg::proxyFence();
    __syncthreads();
  };
  if (tiles > 0) {  // tile 0: S and its softmax only
    copies(0);
    wg::fence();
    wg::scores(s, qAddr, kAddr, wr);
    wg::wait<0>();
    wg::pin(s);
    softmaxTile<BC>(s, m, l, alpha, needsMask<BR, BC>(q0, 0), q0 + warp * 16, 0);
    wg::packP(p, s);
    __syncthreads();  // both warpgroups are done with K_0: the next copies refill its buffer
  }
  for (int t = 1; t < tiles; ++t) {
    copies(t);
    // Two groups on the tensor cores: S = Q K_t^T, then O += P_t-1 V_t-1. The softmax of S
    // runs once S is done, while the second product still runs.
    wg::fence();
    wg::scores(s, qAddr, kAddr + (t & 1) * BC * FA_D * 2, wr);
    wg::product(acc, p, vAddr + ((t - 1) & 1) * BC * FA_DV * 2);
    wg::wait<1>();
    wg::pin(s);
    softmaxTile<BC>(s, m, l, alpha, needsMask<BR, BC>(q0, t * BC), q0 + warp * 16, t * BC);
    wg::wait<0>();
    wg::pin(acc);
    wg::pin(p);
    rescale(acc, alpha);
    wg::packP(p, s);
    __syncthreads();  // both warpgroups are done with K_t and V_t-1: the next copies refill them
  }
  if (tiles > 0) {  // the last tile's P V
    cpWait<0>();
    wg::proxyFence();
    __syncthreads();
    wg::fence();
    wg::product(acc, p, vAddr + ((tiles - 1) & 1) * BC * FA_DV * 2);
    wg::wait<0>();
    wg::pin(acc);
    wg::pin(p);
  }
  cpWait<0>();  // no copy in flight at exit (no key tile: the Q tile's)
  storeForward(acc, m, l, o, lse, z, q0 + warp * 16);
}
#endif  // !FA_BACKWARD
