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
//     and its 64-wide column blocks BC x 128 bytes apart (mnMajor says which field holds
//     which; a probe on an H200 found the other assignment faulting).
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
// Step kk (rows 16 kk .. 16 kk + 15 of the reduction dim) of an MN-major tile of R rows: its
// 8-row groups 1024 bytes apart (the stride field), its 64-wide column blocks R x 128 bytes
// apart (the leading field; the other way round faults).
template <int R>
__device__ __forceinline__ unsigned long long mnMajor(unsigned tile, int kk) {
  return desc(tile + kk * 16 * 128, R * 128, 1024);
}

__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// Shared memory written by the generic proxy (cp.async, ordinary stores) and read next by the
// tensor cores' async proxy needs this in each writing thread before the barrier.
__device__ __forceinline__ void proxyFence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps the compiler from moving reads or writes of an accumulator across a wgmma fence, issue
// or wait: the asm below "writes" every register, so nothing moves past it. Pinned before each
// wgmma.fence (the registers the products read are final) and after each wait (their results
// are not read before).
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
// in shared memory, or either MN-major (TA, TB: the tensor cores read it transposed). mmaRS:
// d += A B, A (64 x 16) in registers, B (16 x N) MN-major in shared memory. The operand lists are written out per N (PTX takes no register arrays).
template <int TA = 0, int TB = 0>
__device__ __forceinline__ void mmaSS(float (&d)[8][4], unsigned long long a, unsigned long long b, int scale) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %35, %36;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "l"(a), "l"(b), "r"(scale), "n"(TA), "n"(TB));
}
__device__ __forceinline__ void mmaRS(float (&d)[8][4], const unsigned (&a)[4], unsigned long long b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
template <int TA = 0, int TB = 0>
__device__ __forceinline__ void mmaSS(float (&d)[4][4], unsigned long long a, unsigned long long b, int scale) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, %19, %20;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
      : "l"(a), "l"(b), "r"(scale), "n"(TA), "n"(TB));
}
template <int TA = 0, int TB = 0>
__device__ __forceinline__ void mmaSS(float (&d)[16][4], unsigned long long a, unsigned long long b, int scale) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
      : "l"(a), "l"(b), "r"(scale), "n"(TA), "n"(TB));
}
__device__ __forceinline__ void mmaRS(float (&d)[16][4], const unsigned (&a)[4], unsigned long long b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// Rows [first, first + ROWS) of a swizzled tile of R rows (global rows r0 + first ...) copied
// by THREADS threads, `tid` this thread's number among them: a warpgroup's own Q rows, or a
// producer warpgroup's K and V tiles. Rows at or past `limit` are zeros.
template <int R, int W, int ROWS, int THREADS>
__device__ __forceinline__ void loadRows(fa_t* dst, const fa_t* src, long long rs, int r0, int first, int limit,
                                         int tid) {
  constexpr int CPR = W / 8, N = ROWS * CPR;
  char* d = reinterpret_cast<char*>(dst);
#pragma unroll
  for (int i = 0; i < (N + THREADS - 1) / THREADS; ++i) {
    const int e = tid + i * THREADS;
    if (N % THREADS != 0 && e >= N) break;
    const int r = first + e / CPR, c = e % CPR, row = r0 + r;
    const bool ok = row < limit;
    cpAsync16(d + swizzled<R>(r, c), src + (long long)(ok ? row : 0) * rs + c * 8, ok);
  }
}

// Rows [r0, r0 + R) of a [*, W] bf16 operand (row stride rs elements) into a swizzled tile,
// asynchronously, by every thread of the block; rows at or past `limit` are zeros.
template <int R, int W>
__device__ __forceinline__ void loadTile(fa_t* dst, const fa_t* src, long long rs, int r0, int limit) {
  loadRows<R, W, R, NT>(dst, src, rs, r0, 0, limit, threadIdx.x);
}

// d = A B^T over W columns: A the 64 rows from r0 of a K-major tile of RA rows, B a K-major
// tile of N rows (S = Q K^T, dP = dO V^T, and the backward's S^T = K Q^T, dP^T = V dO^T).
template <int RA, int N, int W>
__device__ __forceinline__ void mmaABt(float (&d)[N / 8][4], unsigned a, int r0, unsigned b) {
#pragma unroll
  for (int kc = 0; kc < W / 16; ++kc) mmaSS(d, kMajor<RA>(a, r0, kc), kMajor<N>(b, 0, kc), kc);
}
// d += P B: P (64 x K) as A fragments, B an MN-major tile of K rows (O += P V, dQ += dS K,
// dV += P^T dO, dK += dS^T Q).
template <int K, int N>
__device__ __forceinline__ void mmaPB(float (&d)[N / 8][4], const unsigned (&p)[K / 16][4], unsigned b) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) mmaRS(d, p[kk], mnMajor<K>(b, kk));
}
// An accumulator-layout tile (64 x K) as bf16 A fragments: mma.sync's m16k16 layout, which
// an m16n8 accumulator pair is once packed (kk: columns 16 kk .. 16 kk + 15).
template <int K>
__device__ __forceinline__ void packA(unsigned (&p)[K / 16][4], const float (&s)[K / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    p[kk][0] = pack(s[2 * kk][0], s[2 * kk][1]);
    p[kk][1] = pack(s[2 * kk][2], s[2 * kk][3]);
    p[kk][2] = pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    p[kk][3] = pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}
// A whole swizzled tile of R rows copied by a producer of THREADS threads with few registers:
// each thread copies one 16-byte column c of every STEP-th row, and STEP is a multiple of the
// swizzle's 8 rows, so the thread's destination moves by a constant and its swizzle never
// changes. (loadRows, unrolled, kept every address in registers: the producer spilled under
// its setmaxnreg budget.) Rows at or past `limit` are zeros.
template <int R, int W, int THREADS>
__device__ __forceinline__ void produceTile(fa_t* dst, const fa_t* src, long long rs, int r0, int limit, int tid) {
  constexpr int CPR = W / 8, STEP = THREADS / CPR;
  static_assert(THREADS % CPR == 0 && STEP % 8 == 0 && R % STEP == 0, "whole swizzle repeats per step");
  const int c = tid % CPR, first = tid / CPR;
  char* d = reinterpret_cast<char*>(dst) + swizzled<R>(first, c);
  const fa_t* from = src + (long long)(r0 + first) * rs + c * 8;
#pragma unroll 4
  for (int i = 0; i < R / STEP; ++i) {
    const bool ok = r0 + first + i * STEP < limit;
    cpAsync16(d + i * STEP * 128, ok ? from : src, ok);
    from += STEP * rs;
  }
}

// mbarriers (PTX ISA, "mbarrier"): a count of arrivals per phase; a waiter names the phase by
// its parity (the n-th completion of a barrier, from 0, has parity n & 1).
__device__ __forceinline__ void mbarInit(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarArrive(unsigned bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar) : "memory");
}
// A warp's one arrival (empty barriers count warps): lane 0 arrives for the warp, after a warp
// barrier, so that every lane's own reads of the buffer (the backward's row statistics are
// read by the threads, not only by the tensor cores) happen before the release that lets the
// producer overwrite it. Without it those reads are ordered by nothing. (racecheck reports
// those reads racing the producer's next copies with or without it: it credits the waiter with
// only part of a phase's arrivals; scripts/probes/racecheck_mbarrier.cu.)
__device__ __forceinline__ void warpReleases(unsigned bar) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0) mbarArrive(bar);
}
// Arrives once every cp.async this thread has issued so far has landed (the copies complete
// the arrival, not the thread: it goes on issuing).
__device__ __forceinline__ void mbarArriveOnCopies(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbarWait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Named barriers of `count` threads (0 is __syncthreads'): sync waits for the count, arrive
// counts this thread in without waiting.
__device__ __forceinline__ void namedSync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void namedArrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// A producer-warpgroup kernel's roles (fa_forward_wgmma_ws, fa_backward_dkdv_wgmma_ws): with
// FA_WG_MAXNREG the producer gives up registers (40 left) that the consumers take (232 each:
// 2 x 128 x 232 + 128 x 40 is the 384-thread block's 168 a thread); the producer ends with no
// copy in flight; a consumer's own tile rows (copied by its 128 threads) are in and visible to
// the tensor cores once ownRowsLanded returns (named barrier 1 + consumer).
// (FA_WG_REGS, when defined, is the consumers' count instead, the producer's then 24: the
// one-pass backward's consumers hold dQ's accumulators beside dK's and dV's.)
#ifndef FA_WG_REGS
#define FA_WG_REGS 232
#endif
__device__ __forceinline__ void producerRegisters() {
#if FA_WG_MAXNREG
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(FA_WG_REGS == 232 ? 40 : 24));
#endif
}
__device__ __forceinline__ void consumerRegisters() {
#if FA_WG_MAXNREG
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(FA_WG_REGS));
#endif
}
__device__ __forceinline__ void producerDone() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
__device__ __forceinline__ void ownRowsLanded(int consumer) {
  cpCommit();
  cpWait<0>();
  proxyFence();
  namedSync(1 + consumer, 128);
}

// The 1024-byte aligned start of the dynamic shared memory (the generator asks for 1 KB more
// than the tiles take): the swizzle's descriptors assume tiles that start on its repeat.
__device__ __forceinline__ char* alignedSmem() {
  extern __shared__ float4 fa_smem4[];
  const unsigned raw = smemAddr(fa_smem4);
  return reinterpret_cast<char*>(fa_smem4) + ((1024u - (raw & 1023u)) & 1023u);
}

}  // namespace wg
}  // namespace fa

#if !FA_BACKWARD
// The shapes both wgmma forwards take (the generator picks wgmma only for these).
static_assert(FA_D == FA_DV && (FA_D == 64 || FA_D == 128), "the wgmma forward takes d = dv of 64 or 128");
static_assert(fa::BR % 64 == 0 && (fa::BC == 64 || fa::BC == 128), "warpgroups of 64 rows, key tiles of one wgmma's n");

// ---- forward on wgmma: o = softmax(q k^T scale) v, lse ----
__device__ __forceinline__ void fa_forward_wgmma(const fa_t* __restrict__ q, const fa_t* __restrict__ k,
                                                 const fa_t* __restrict__ v, fa_t* __restrict__ o,
                                                 float* __restrict__ lse) {
  using namespace fa;
  char* smem = wg::alignedSmem();  // arrays at the generator's offsets (FA_SMEM_WG_*)
  fa_t* Qs = reinterpret_cast<fa_t*>(smem + FA_SMEM_WG_FWD_Q);  // [BR][D] swizzled
  fa_t* Ks = reinterpret_cast<fa_t*>(smem + FA_SMEM_WG_FWD_K);  // [2][BC][D]
  fa_t* Vs = reinterpret_cast<fa_t*>(smem + FA_SMEM_WG_FWD_V);  // [2][BC][DV]
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
    wg::mmaABt<BR, BC, FA_D>(s, qAddr, wr, kAddr);
    wg::commit();
    wg::wait<0>();
    wg::pin(s);
    softmaxTile<BC>(s, m, l, alpha, needsMask<BR, BC>(q0, 0), q0 + warp * 16, 0);
    wg::packA<BC>(p, s);
    __syncthreads();  // both warpgroups are done with K_0: the next copies refill its buffer
  }
  for (int t = 1; t < tiles; ++t) {
    copies(t);
    // Two groups on the tensor cores: S = Q K_t^T, then O += P_t-1 V_t-1. The softmax of S
    // runs once S is done, while the second product still runs.
    wg::pin(acc);  // the rescale and the packing are done before the fence
    wg::pin(p);
    wg::fence();
    wg::mmaABt<BR, BC, FA_D>(s, qAddr, wr, kAddr + (t & 1) * BC * FA_D * 2);
    wg::commit();
    wg::mmaPB<BC, FA_DV>(acc, p, vAddr + ((t - 1) & 1) * BC * FA_DV * 2);
    wg::commit();
    wg::wait<1>();
    wg::pin(s);
    softmaxTile<BC>(s, m, l, alpha, needsMask<BR, BC>(q0, t * BC), q0 + warp * 16, t * BC);
    wg::wait<0>();
    wg::pin(acc);
    wg::pin(p);
    rescale(acc, alpha);
    wg::packA<BC>(p, s);
    __syncthreads();  // both warpgroups are done with K_t and V_t-1: the next copies refill them
  }
  if (tiles > 0) {  // the last tile's P V
    cpWait<0>();
    wg::proxyFence();
    __syncthreads();
    wg::pin(acc);
    wg::pin(p);
    wg::fence();
    wg::mmaPB<BC, FA_DV>(acc, p, vAddr + ((tiles - 1) & 1) * BC * FA_DV * 2);
    wg::commit();
    wg::wait<0>();
    wg::pin(acc);
    wg::pin(p);
  }
  cpWait<0>();  // no copy in flight at exit (no key tile: the Q tile's)
  storeForward(acc, m, l, o, lse, z, q0 + warp * 16);
}
#endif  // !FA_BACKWARD

#if !FA_BACKWARD && FA_WG_PRODUCER
// ---- forward on wgmma with a producer warpgroup: the same results as fa_forward_wgmma ----
// FlashAttention-3's structure with cp.async in place of TMA (TMA needs a tensor map built on
// the host for each operand address; cp.async needs nothing): the block is FA_WARPS / 4
// consumer warpgroups of 64 query rows, as in fa_forward_wgmma, plus one producer warpgroup
// (the last 128 threads) that only copies K and V tiles into a ring of FA_WG_STAGES buffers
// each. Full and empty mbarriers per buffer replace the block barriers: a consumer waits
// only for the tile it needs and frees a buffer as soon as its own product has read it, so
// the consumer warpgroups no longer meet at every tile. With two consumers, named barriers
// make them issue their products in turn (pingpong): one warpgroup's softmax runs while the
// other's products occupy the tensor cores. With FA_WG_MAXNREG, setmaxnreg hands the
// producer's registers to the consumers (the producer keeps 40 of them).
__device__ __forceinline__ void fa_forward_wgmma_ws(const fa_t* __restrict__ q, const fa_t* __restrict__ k,
                                                    const fa_t* __restrict__ v, fa_t* __restrict__ o,
                                                    float* __restrict__ lse) {
  using namespace fa;
  constexpr int S = FA_WG_STAGES, CONSUMERS = FA_WARPS / 4;
  static_assert(CONSUMERS == 1 || CONSUMERS == 2, "one or two consumer warpgroups");
  char* smem = wg::alignedSmem();  // arrays at the generator's offsets (FA_SMEM_WG_FWS_*)
  fa_t* Qs = reinterpret_cast<fa_t*>(smem + FA_SMEM_WG_FWS_Q);  // [BR][D] swizzled
  fa_t* Ks = reinterpret_cast<fa_t*>(smem + FA_SMEM_WG_FWS_K);  // [S][BC][D]
  fa_t* Vs = reinterpret_cast<fa_t*>(smem + FA_SMEM_WG_FWS_V);  // [S][BC][DV]
  // Barriers: fullK[S], fullV[S] (the producer's 128 threads arrive as their copies land),
  // emptyK[S], emptyV[S] (each consumer warp arrives once its products have read the buffer).
  const unsigned bars = smemAddr(smem + FA_SMEM_WG_FWS_BAR);
  auto fullK = [&](int s) { return bars + 8 * s; };
  auto fullV = [&](int s) { return bars + 8 * (S + s); };
  auto emptyK = [&](int s) { return bars + 8 * (2 * S + s); };
  auto emptyV = [&](int s) { return bars + 8 * (3 * S + s); };
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      wg::mbarInit(fullK(s), 128);
      wg::mbarInit(fullV(s), 128);
      wg::mbarInit(emptyK(s), FA_WARPS);
      wg::mbarInit(emptyV(s), FA_WARPS);
    }
  }
  __syncthreads();  // the barriers are initialised before anyone waits on them
  const int z = blockIdx.x, q0 = (gridDim.y - 1 - blockIdx.y) * BR;  // longest causal rows first
  const int tiles = keyTiles<BR, BC>(q0);  // attention_common.cuh
  if (threadIdx.x >= NT) {
    // The producer: K_j and V_j into buffer j % S once the consumers have freed it (the
    // n-th refill of a buffer waits for its n-th release).
    wg::producerRegisters();
    const int p = threadIdx.x - NT;
    k += fa_k_batch(z);
    v += fa_v_batch(z);
    for (int j = 0; j < tiles; ++j) {
      const int s = j % S;
      if (j >= S) wg::mbarWait(emptyK(s), ((j / S) - 1) & 1);
      wg::produceTile<BC, FA_D, 128>(Ks + s * BC * FA_D, k, FA_K_RS, j * BC, FA_TK, p);
      wg::mbarArriveOnCopies(fullK(s));
      if (j >= S) wg::mbarWait(emptyV(s), ((j / S) - 1) & 1);
      wg::produceTile<BC, FA_DV, 128>(Vs + s * BC * FA_DV, v, FA_V_RS, j * BC, FA_TK, p);
      wg::mbarArriveOnCopies(fullV(s));
    }
    wg::producerDone();
    return;
  }
  wg::consumerRegisters();
  const int warp = threadIdx.x >> 5, c = warp >> 2, wr = c * 64;  // the warpgroup and its first row of BR
  q += fa_q_batch(z);
  // Each consumer copies its own 64 rows of Q and waits for them alone.
  wg::loadRows<BR, FA_D, 64, 128>(Qs, q, FA_Q_RS, q0, wr, FA_TQ, threadIdx.x & 127);
  wg::ownRowsLanded(c);
  const unsigned qAddr = smemAddr(Qs), kAddr = smemAddr(Ks), vAddr = smemAddr(Vs);
  // Pingpong: consumer c issues its products after barrier 3 + c, and then lets the other
  // one issue (its barrier 3 + (1 - c)). Consumer 1 starts by letting consumer 0 go first;
  // every issue point but consumer 1's last is followed by an arrival, so each barrier sees
  // as many arrivals as waits.
  constexpr bool PINGPONG = FA_WG_PINGPONG && CONSUMERS == 2;
  const int issues = tiles + 1;  // tile 0's S, tiles 1 .. tiles - 1's S and P V, the last P V
  int issued = 0;
  auto myTurn = [&] {
    if (PINGPONG) wg::namedSync(3 + c, 256);
  };
  auto yourTurn = [&] {
    ++issued;
    if (PINGPONG && !(c == 1 && issued == issues)) wg::namedArrive(3 + (1 - c), 256);
  };
  if (PINGPONG && c == 1 && tiles > 0) wg::namedArrive(3, 256);
  auto waitFull = [&](unsigned bar, int t) {
    wg::mbarWait(bar, (t / S) & 1);
    wg::proxyFence();  // the copies (generic proxy) are read next by the tensor cores (async proxy)
  };
  float m[2] = {FA_NEG_INF, FA_NEG_INF}, l[2] = {0.f, 0.f}, alpha[2];
  float acc[FA_DV / 8][4];
  zero(acc);
  float s[BC / 8][4];
  unsigned p[BC / 16][4];  // P of the previous tile as A fragments
  if (tiles > 0) {  // tile 0: S and its softmax only
    waitFull(fullK(0), 0);
    myTurn();
    wg::fence();
    wg::mmaABt<BR, BC, FA_D>(s, qAddr, wr, kAddr);
    wg::commit();
    yourTurn();
    wg::wait<0>();
    wg::pin(s);
    wg::warpReleases(emptyK(0));
    softmaxTile<BC>(s, m, l, alpha, needsMask<BR, BC>(q0, 0), q0 + warp * 16, 0);
    wg::packA<BC>(p, s);
  }
  for (int t = 1; t < tiles; ++t) {
    const int sk = t % S, sv = (t - 1) % S;
    waitFull(fullK(sk), t);
    waitFull(fullV(sv), t - 1);
    myTurn();
    wg::pin(acc);  // the rescale and the packing are done before the fence
    wg::pin(p);
    wg::fence();
    wg::mmaABt<BR, BC, FA_D>(s, qAddr, wr, kAddr + sk * BC * FA_D * 2);
    wg::commit();
    wg::mmaPB<BC, FA_DV>(acc, p, vAddr + sv * BC * FA_DV * 2);
    wg::commit();
    yourTurn();
    wg::wait<1>();
    wg::pin(s);
    wg::warpReleases(emptyK(sk));
    softmaxTile<BC>(s, m, l, alpha, needsMask<BR, BC>(q0, t * BC), q0 + warp * 16, t * BC);
    wg::wait<0>();
    wg::pin(acc);
    wg::pin(p);
    wg::warpReleases(emptyV(sv));
    rescale(acc, alpha);
    wg::packA<BC>(p, s);
  }
  if (tiles > 0) {  // the last tile's P V
    const int sv = (tiles - 1) % S;
    waitFull(fullV(sv), tiles - 1);
    myTurn();
    wg::pin(acc);
    wg::pin(p);
    wg::fence();
    wg::mmaPB<BC, FA_DV>(acc, p, vAddr + sv * BC * FA_DV * 2);
    wg::commit();
    yourTurn();
    wg::wait<0>();
    wg::pin(acc);
    wg::pin(p);
  }
  storeForward(acc, m, l, o, lse, z, q0 + warp * 16);
}
#endif  // !FA_BACKWARD && FA_WG_PRODUCER

#if FA_BACKWARD
namespace fa {
namespace wg {
// A warpgroup's dS^T (its 64 key rows x BQ queries, as packA's A fragments: rows are keys)
// into a swizzled tile of 64 rows: dQ's product reads it as its A operand, MN-major (queries
// contiguous). Fragment kk holds rows g and g + 8 of the warp's 16 keys, 16-byte chunks 2 kk
// and 2 kk + 1, 4 bytes a lane (t4) in each.
__device__ __forceinline__ void storeDsT(char* dsT, const unsigned (&da)[BQ / 16][4]) {
  static_assert(BQ == 64, "one 128-byte swizzle row a key");
  const int lane = threadIdx.x & 31, r = ((threadIdx.x >> 5) & 3) * 16 + (lane >> 2), t4 = lane & 3;
#pragma unroll
  for (int kk = 0; kk < BQ / 16; ++kk)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      *reinterpret_cast<unsigned*>(dsT + swizzled<64>(r + 8 * (e & 1), 2 * kk + (e >> 1)) + 4 * t4) = da[kk][e];
}
// One query tile of dK/dV on wgmma, for this warpgroup's 64 key rows (from wr of the K and V
// tiles at kAddr, vAddr): S^T = K Q^T and dP^T = V dO^T in one group (Q, dO: the swizzled
// tiles at qt, gt), P^T and dS^T in registers (dsTransposed, from the query rows' {D, L2} in
// Rb), then dV += P^T dO and dK += dS^T Q with dO and Q read transposed. Returns once the
// products are done: the caller may then free the query tile's buffer. DQ (one pass,
// FA_WG_FUSED_DQ): dS^T also goes to the block's dS^T tile (dsT: this
// warpgroup's 64 key rows of its 128, bf16 as the dK product reads them), and once both
// warpgroups' rows are in, gq = dS K for this warpgroup's half of d over all 128 keys, in the
// same group of products (A read transposed from the dS^T tile, B the K tile's columns from
// c d / 2, read MN-major).
template <bool DQ>
__device__ __forceinline__ void dkdvTile(float (&gk)[FA_D / 8][4], float (&gv)[FA_DV / 8][4], unsigned kAddr,
                                         unsigned vAddr, unsigned qt, unsigned gt, int wr, const float2* Rb, int q0,
                                         int k0, int kw, float (&gq)[FA_D / 16][4], char* dsT) {
  static_assert(FA_D == FA_DV && (FA_D == 64 || FA_D == 128), "the wgmma backward takes d = dv of 64 or 128");
  static_assert(BR == 128 && BQ == 64, "two warpgroups of 64 key rows, query tiles of one wgmma's n");
  float s[BQ / 8][4], dp[BQ / 8][4];  // S^T, dP^T: rows keys, columns queries
  fence();
  mmaABt<BR, BQ, FA_D>(s, kAddr, wr, qt);
  mmaABt<BR, BQ, FA_DV>(dp, vAddr, wr, gt);
  commit();
  wait<0>();
  pin(s);
  pin(dp);
  dsTransposed<BQ>(s, dp, Rb, q0, kw, needsMask<BQ, BR>(q0, k0));
  unsigned pa[BQ / 16][4], da[BQ / 16][4];
  packA<BQ>(pa, s);
  packA<BQ>(da, dp);
  if (DQ) {
    storeDsT(dsT + wr * 128, da);
    proxyFence();  // written by the threads, read next by the tensor cores
    namedSync(3, 256);  // both warpgroups' rows: each one's dQ product reads all 128
  }
  pin(pa);
  pin(da);
  pin(gk);
  pin(gv);
  // The K tile's columns [c d / 2, (c + 1) d / 2): at d 128 column block c (BR x 128 bytes
  // each), at d 64 the second half of each 128-byte row.
  auto dqProduct = [&] {
    const unsigned ds = smemAddr(dsT), kCols = kAddr + (FA_D == 128 ? wr / 64 * BR * 128 : wr / 64 * 64);
#pragma unroll
    for (int kk = 0; kk < BR / 16; ++kk) mmaSS<1, 1>(gq, mnMajor<BR>(ds, kk), mnMajor<BR>(kCols, kk), kk);
  };
  // Under the dQ writer's register split (FA_WG_REGS: 240 a consumer thread) dQ's product runs
  // after dK's and dV's, so that P^T and dS^T are dead before its accumulators are live.
  constexpr bool SPLIT = FA_WG_FUSED_DQ == 2;
  fence();
  mmaPB<BQ, FA_DV>(gv, pa, gt);
  mmaPB<BQ, FA_D>(gk, da, qt);
  if (DQ && !SPLIT) dqProduct();
  commit();
  wait<0>();
  pin(gk);
  pin(gv);
  pin(pa);
  pin(da);
  if (DQ && SPLIT) {
    pin(gk);
    pin(gv);
    fence();
    dqProduct();
    commit();
    wait<0>();
    pin(gk);
    pin(gv);
  }
  if (DQ) pin(gq);
}

#if FA_WG_FUSED_DQ
// One pass: each query tile's dQ summed in f32 over the key blocks that see it, in a fixed
// order, key blocks from the last that sees the tile (the first to reach it on the causal
// walk) down to block 0. Warpgroup c of a block owns columns [c d / 2, (c + 1) d / 2) of the
// tile, so the two halves are two independent chains: fa_dqsem counts, per (query head, query
// tile, half), the blocks that have added, and a warpgroup waits for its turn before it reads
// the sum. No float atomics: the result is the same bit for bit every run. Blocks start last
// key block first (gridDim.y - 1 - blockIdx.y), so the blocks one waits for started before it
// and it never waits on one without a multiprocessor. Block 0 stores dQ itself, times the
// scale, and leaves the counter at 0 for the next launch (module-scope memory starts zeroed).
__device__ unsigned fa_dqsem[FA_DQTILES * 2];
__device__ float4 fa_dqsum[(long long)FA_DQTILES * 128 * (FA_D / 8)];

__device__ __forceinline__ unsigned ldAcquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void releaseIncrement(unsigned* p) {
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(p) : "memory");
}

// This warpgroup's half of query tile q0's dQ (head zq; dkdvTile<true>'s gq, accumulator layout
// of 64 rows x d / 2) added into the tile's sum in its turn; k0 is the block's first key row,
// c its warpgroup. Block 0 stores dQ itself.
__device__ __forceinline__ void addDq(float (&acc)[FA_D / 16][4], int zq, int q0, int k0, int c, fa_t* dq) {
  constexpr int J = FA_D / 16;  // float4s a thread
  const int tid = threadIdx.x & 127, qi = q0 / BQ, tilesQ = (FA_TQ + BQ - 1) / BQ;
  // Key blocks that see query tile qi: 0 .. last (FA_TQ == FA_TK, causal: the generator's condition).
  const int last = min((FA_TK + BR - 1) / BR - 1, ((qi + 1) * BQ - 1) / BR), kb = k0 / BR;
  const long long chain = ((long long)zq * tilesQ + qi) * 2 + c;
  unsigned* sem = fa_dqsem + chain;
  float4* sum = fa_dqsum + chain * 128 * J + tid;  // this thread's float4 j at sum[128 j]
  if (kb != last) {
    if (tid == 0)
      while (ldAcquire(sem) != unsigned(last - kb)) __nanosleep(32);
    namedSync(1 + c, 128);  // thread 0 saw the blocks before this one done
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const float4 p = __ldcg(sum + 128 * j);  // L2: another multiprocessor wrote it
      acc[j][0] += p.x, acc[j][1] += p.y, acc[j][2] += p.z, acc[j][3] += p.w;
    }
  }
  if (kb == 0) {
    const int lane = tid & 31, r = q0 + (tid >> 5) * 16 + (lane >> 2), col = c * (FA_D / 2) + 2 * (lane & 3);
    fa_t* out = dq + (long long)zq * FA_TQ * FA_D;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (r + 8 * h < FA_TQ)
#pragma unroll
        for (int j = 0; j < J; ++j)
          store2(out + (long long)(r + 8 * h) * FA_D + col + 8 * j, acc[j][2 * h] * FA_SCALE, acc[j][2 * h + 1] * FA_SCALE);
    if (tid == 0) *sem = 0;
    return;
  }
#pragma unroll
  for (int j = 0; j < J; ++j) __stcg(sum + 128 * j, make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]));
  namedSync(1 + c, 128);  // every thread's stores precede thread 0's release
  if (tid == 0) releaseIncrement(sem);
}
#endif  // FA_WG_FUSED_DQ
}  // namespace wg
}  // namespace fa

// ---- backward on wgmma, pass 1: dq for a block of BR query rows ----
// attention_mma.cuh's fa_backward_dq with the row statistics from global memory (rowStats):
// per key tile S = Q K^T and dP = dO V^T in one group from swizzled shared tiles, dS in
// registers, then dQ += dS K with K read transposed.
__device__ __forceinline__ void fa_backward_dq_wgmma(const fa_t* __restrict__ q, const fa_t* __restrict__ k,
                                                     const fa_t* __restrict__ v, const fa_t* __restrict__ o,
                                                     const fa_t* __restrict__ dO, const float* __restrict__ lse,
                                                     fa_t* __restrict__ dq, fa::FaRope rope = {}) {
  using namespace fa;
  static_assert(FA_D == FA_DV && (FA_D == 64 || FA_D == 128), "the wgmma backward takes d = dv of 64 or 128");
  static_assert(BR % 64 == 0 && (BC == 64 || BC == 128) && NT % BR == 0, "warpgroups of 64 rows");
  char* smem = wg::alignedSmem();  // arrays at the generator's offsets (FA_SMEM_WG_*)
  fa_t* Qs = reinterpret_cast<fa_t*>(smem + FA_SMEM_WG_DQ_Q);     // [BR][D] swizzled
  fa_t* Gs = reinterpret_cast<fa_t*>(smem + FA_SMEM_WG_DQ_G);     // dO: [BR][DV]
  fa_t* Ks = reinterpret_cast<fa_t*>(smem + FA_SMEM_WG_DQ_K);     // [2][BC][D]
  fa_t* Vs = reinterpret_cast<fa_t*>(smem + FA_SMEM_WG_DQ_V);     // [2][BC][DV]
  float* Dsm = reinterpret_cast<float*>(smem + FA_SMEM_WG_DQ_D);    // [BR]
  float* L2sm = reinterpret_cast<float*>(smem + FA_SMEM_WG_DQ_L2);  // [BR]
  const unsigned qAddr = smemAddr(Qs), gAddr = smemAddr(Gs), kAddr = smemAddr(Ks), vAddr = smemAddr(Vs);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3, wr = (warp >> 2) * 64;
  const int z = blockIdx.x, q0 = (gridDim.y - 1 - blockIdx.y) * BR;  // longest first, as the forward
  float2* stats;
  if (!dqOperands<BR>(z, q0, q, k, v, o, dO, lse, stats, dq)) return;
  const int tiles = keyTiles<BR, BC>(q0);  // attention_common.cuh
  wg::loadTile<BR, FA_D>(Qs, q, FA_Q_RS, q0, FA_TQ);
  wg::loadTile<BR, FA_DV>(Gs, dO, FA_DO_RS, q0, FA_TQ);
  if (tiles > 0) {
    wg::loadTile<BC, FA_D>(Ks, k, FA_K_RS, 0, FA_TK);
    wg::loadTile<BC, FA_DV>(Vs, v, FA_V_RS, 0, FA_TK);
  }
  cpCommit();
  rowStats<BR>(Dsm, L2sm, stats, o, dO, lse, q0);  // overlaps the tiles' copies
  __syncthreads();
  float Dr[2], L2r[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) Dr[h] = Dsm[warp * 16 + g + 8 * h], L2r[h] = L2sm[warp * 16 + g + 8 * h];
  float acc[FA_D / 8][4];
  zero(acc);
  for (int t = 0; t < tiles; ++t) {
    const int k0 = t * BC, buf = t & 1;
    if (t + 1 < tiles) {
      wg::loadTile<BC, FA_D>(Ks + (buf ^ 1) * BC * FA_D, k, FA_K_RS, k0 + BC, FA_TK);
      wg::loadTile<BC, FA_DV>(Vs + (buf ^ 1) * BC * FA_DV, v, FA_V_RS, k0 + BC, FA_TK);
    }
    cpCommit();  // possibly empty, so that wait_group 1 always means "tile t is in"
    cpWait<1>();
    wg::proxyFence();
    __syncthreads();
    const unsigned kt = kAddr + buf * BC * FA_D * 2, vt = vAddr + buf * BC * FA_DV * 2;
    float s[BC / 8][4], dp[BC / 8][4];
    wg::fence();
    wg::mmaABt<BR, BC, FA_D>(s, qAddr, wr, kt);
    wg::mmaABt<BR, BC, FA_DV>(dp, gAddr, wr, vt);
    wg::commit();
    wg::wait<0>();
    wg::pin(s);
    wg::pin(dp);
    const bool mask = needsMask<BR, BC>(q0, k0);
#pragma unroll
    for (int j = 0; j < BC / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1;
        float p = ex2(s[j][e] * FA_SCALE_LOG2 - L2r[h]);
        if (mask && !visible(q0 + warp * 16 + g + 8 * h, k0 + 8 * j + 2 * t4 + (e & 1))) p = 0.f;
        s[j][e] = p * (dp[j][e] - Dr[h]);  // dS / scale: the scale is applied once, to dQ
      }
    unsigned ds[BC / 16][4];
    wg::packA<BC>(ds, s);
    wg::pin(ds);
    wg::pin(acc);
    wg::fence();
    wg::mmaPB<BC, FA_D>(acc, ds, kt);
    wg::commit();
    wg::wait<0>();
    wg::pin(acc);
    wg::pin(ds);
    __syncthreads();  // this buffer is refilled by the next iteration's prefetch
  }
  cpWait<0>();
  storeRows<FA_D, FA_DQ_OUT_RS>(dq + fa_dq_out(z), acc, q0 + warp * 16, FA_TQ, FA_SCALE, rope.qc, rope.qs);
}

namespace fa {
namespace wg {
// The dK/dV blocks' consumers (the first NT threads): K and V rows of key block k0 in shared
// memory, its query tiles (QueryWalk) double-buffered with cp.async behind `barrier()` (the
// consumers' block barrier), `tile(gk, gv, gq, qt, gt, Rb, it, zq, q0, kw)` on each (the
// products and, in one pass, dQ's share), then dK and dV stored. Shared by
// fa_backward_dkdv_wgmma and the dQ writer's fa_backward_dkdv_wgmma_dqw, which differ in their
// tile and barrier.
template <class Barrier, class Tile>
__device__ __forceinline__ void dkdvConsumers(char* smem, const fa_t* __restrict__ q, const fa_t* __restrict__ k,
                                              const fa_t* __restrict__ v, const fa_t* __restrict__ dO,
                                              fa_t* __restrict__ dk, fa_t* __restrict__ dv, int z, int k0,
                                              FaRope rope, Barrier barrier, Tile tile) {
  fa_t* Ks = reinterpret_cast<fa_t*>(smem + FA_SMEM_WG_DKDV_K);      // [BR][D] swizzled
  fa_t* Vs = reinterpret_cast<fa_t*>(smem + FA_SMEM_WG_DKDV_V);      // [BR][DV]
  fa_t* Qs = reinterpret_cast<fa_t*>(smem + FA_SMEM_WG_DKDV_Q);      // [2][BQ][D]
  fa_t* Gs = reinterpret_cast<fa_t*>(smem + FA_SMEM_WG_DKDV_G);      // dO: [2][BQ][DV]
  float2* RS = reinterpret_cast<float2*>(smem + FA_SMEM_WG_DKDV_RS);  // {D, L2}: [2][BQ]
  const unsigned qAddr = smemAddr(Qs), gAddr = smemAddr(Gs);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  k += fa_k_batch(z * FA_GROUP);
  v += fa_v_batch(z * FA_GROUP);
  const QueryWalk walk(k0);  // attention_mma.cuh
  const int steps = walk.steps;
  auto loadQueryTile = [&](int b, int it) {
    const int zq = walk.head(z, it), q0 = walk.q0(it);
    loadTile<BQ, FA_D>(Qs + b * BQ * FA_D, q + fa_q_batch(zq), FA_Q_RS, q0, FA_TQ);
    loadTile<BQ, FA_DV>(Gs + b * BQ * FA_DV, dO + fa_do_batch(zq), FA_DO_RS, q0, FA_TQ);
    loadRowStats<BQ>(RS + b * BQ, fa_rowstats + (long long)zq * FA_TQ, q0);
  };
  loadTile<BR, FA_D>(Ks, k, FA_K_RS, k0, FA_TK);
  loadTile<BR, FA_DV>(Vs, v, FA_V_RS, k0, FA_TK);
  if (steps > 0) loadQueryTile(0, 0);
  cpCommit();
  float gk[FA_D / 8][4], gv[FA_DV / 8][4];
  zero(gk);
  zero(gv);
  const int kw = k0 + warp * 16 + (lane >> 2);  // this thread's key rows: kw, kw + 8
  for (int it = 0; it < steps; ++it) {
    const int q0 = walk.q0(it), buf = it & 1;
    if (it + 1 < steps) loadQueryTile(buf ^ 1, it + 1);
    cpCommit();
    cpWait<1>();
    proxyFence();
    barrier();
    const unsigned qt = qAddr + buf * BQ * FA_D * 2, gt = gAddr + buf * BQ * FA_DV * 2;
    float gq[FA_D / 16][4];  // one pass: this warpgroup's half of the tile's dQ
    tile(gk, gv, gq, qt, gt, RS + buf * BQ, it, walk.head(z, it), q0, kw);
    barrier();  // this buffer is refilled by the next iteration's prefetch
  }
  cpWait<0>();
  // dV first: its accumulators are free by the time dK's (rotated) stores need registers.
  if (dv) storeRows<FA_DV, FA_DV_OUT_RS>(dv + fa_dv_out(z), gv, k0 + warp * 16, FA_TK, 1.f);
  if (dk) storeRows<FA_D, FA_DK_OUT_RS>(dk + fa_dk_out(z), gk, k0 + warp * 16, FA_TK, FA_SCALE, rope.kc, rope.ks);
}
}  // namespace wg
}  // namespace fa

// ---- backward on wgmma, pass 2: dk, dv for a block of BR key rows ----
// attention_mma.cuh's fa_backward_dkdv: per query tile S^T = K Q^T and dP^T = V dO^T in one
// group, P^T and dS^T in registers, then dV += P^T dO and dK += dS^T Q with dO and Q read
// transposed; the group's query heads in a fixed order (no atomics). In one pass
// (FA_WG_FUSED_DQ 1) dQ's share too, each warpgroup adding its half in turn (addDq).
__device__ __forceinline__ void fa_backward_dkdv_wgmma(const fa_t* __restrict__ q, const fa_t* __restrict__ k,
                                                       const fa_t* __restrict__ v, const fa_t* __restrict__ o,
                                                       const fa_t* __restrict__ dO, const float* __restrict__ lse,
                                                       fa_t* __restrict__ dk, fa_t* __restrict__ dv,
                                                       fa_t* __restrict__ dq = nullptr, fa::FaRope rope = {}) {
  using namespace fa;
  char* smem = wg::alignedSmem();  // arrays at the generator's offsets (FA_SMEM_WG_*)
  const unsigned kAddr = smemAddr(smem + FA_SMEM_WG_DKDV_K), vAddr = smemAddr(smem + FA_SMEM_WG_DKDV_V);
  const int wr = (threadIdx.x >> 7) * 64;
#if FA_WG_FUSED_DQ == 1
  // The last key rows first: a query tile's dQ sum takes key blocks from the last down (addDq).
  const int z = blockIdx.x, k0 = (gridDim.y - 1 - blockIdx.y) * BR;
  char* dsT = smem + FA_SMEM_WG_DKDV_DS;  // dS^T of the block's 128 keys x BQ queries
#else
  const int z = blockIdx.x, k0 = blockIdx.y * BR;  // causal: the first key rows have the most work
#endif
  auto tile = [&](float(&gk)[FA_D / 8][4], float(&gv)[FA_DV / 8][4], float(&gq)[FA_D / 16][4], unsigned qt,
                  unsigned gt, const float2* Rb, int it, int zq, int q0, int kw) {
#if FA_WG_FUSED_DQ == 1
    if (dq) {
      wg::dkdvTile<true>(gk, gv, kAddr, vAddr, qt, gt, wr, Rb, q0, k0, kw, gq, dsT);
      // Added at once: gq, defined by a wgmma, read on a later iteration or under another
      // wgmma's flight would make ptxas serialize every wgmma of the kernel (C7517, C7518).
      wg::addDq(gq, zq, q0, k0, wr / 64, dq);
      return;
    }
#endif
    wg::dkdvTile<false>(gk, gv, kAddr, vAddr, qt, gt, wr, Rb, q0, k0, kw, gq, nullptr);
  };
  wg::dkdvConsumers(smem, q, k, v, dO, dk, dv, z, k0, rope, [] { __syncthreads(); }, tile);
}
#endif  // FA_BACKWARD

#if FA_BACKWARD && FA_WG_FUSED_DQ == 2
namespace fa {
namespace wg {
// The dQ writer (FA_WG_FUSED_DQ 2): the one-pass backward's ordered adds moved off the
// consumers. Each consumer warpgroup leaves its half of a tile's dQ in `stash` (thread t's
// float4 j at [c][j][t]) and its warps arrive on `full`; the writer's warps 2c and 2c + 1
// take chain c (half c): wait their turn on the counter, copy the tile's f32 sum into
// `landing` with cp.async (all of it in flight at once, no registers), add the stash, store
// (block 0: dQ itself, bf16 times the scale), arrive on `empty` (the stash may be refilled),
// then release the chain. The order of the adds is addDq's; only who does them changed.
__device__ __forceinline__ void dqWriter(const float4* stash, float4* landing, unsigned full, unsigned empty,
                                         const QueryWalk& walk, int z, int k0, fa_t* dq) {
  constexpr int J = FA_D / 16, E = 128 * J / 64;  // float4s a consumer thread, a writer thread
  const int tid = threadIdx.x - NT, c = tid >> 6, w = tid & 63, kb = k0 / BR, tilesQ = (FA_TQ + BQ - 1) / BQ;
  const float4* mine = stash + c * 128 * J;
  float4* land = landing + c * 128 * J;
  for (int it = 0; it < walk.steps; ++it) {
    const int zq = walk.head(z, it), q0 = walk.q0(it), qi = q0 / BQ;
    const int last = min((FA_TK + BR - 1) / BR - 1, ((qi + 1) * BQ - 1) / BR);
    const long long chain = ((long long)zq * tilesQ + qi) * 2 + c;
    unsigned* sem = fa_dqsem + chain;
    float4* sum = fa_dqsum + chain * 128 * J;
    if (kb != last) {
      while (!__all_sync(0xffffffffu, ldAcquire(sem) == unsigned(last - kb))) __nanosleep(32);
#pragma unroll
      for (int i = 0; i < E; ++i) cpAsync16(land + w + 64 * i, sum + w + 64 * i, true);
      cpCommit();
    }
    mbarWait(full, it & 1);  // the consumers' stash of this tile
    if (kb != last) producerDone();  // this thread's own copies landed (it reads only those)
#pragma unroll 1
    for (int i = 0; i < E; ++i) {  // (the writer has 24 registers: unrolled, it spilled)
      const int e = w + 64 * i;
      float4 v = mine[e];
      if (kb != last) {
        const float4 p = land[e];
        v.x += p.x, v.y += p.y, v.z += p.z, v.w += p.w;
      }
      if (kb == 0) {  // float4 j of consumer thread t: rows r, r + 8, columns col, col + 1
        const int j = e >> 7, t = e & 127, l = t & 31;
        const int r = q0 + (t >> 5) * 16 + (l >> 2), col = c * (FA_D / 2) + 8 * j + 2 * (l & 3);
        fa_t* out = dq + (long long)zq * FA_TQ * FA_D + col;
        if (r < FA_TQ) store2(out + (long long)r * FA_D, v.x * FA_SCALE, v.y * FA_SCALE);
        if (r + 8 < FA_TQ) store2(out + (long long)(r + 8) * FA_D, v.z * FA_SCALE, v.w * FA_SCALE);
      } else {
        __stcg(sum + e, v);
      }
    }
    warpReleases(empty);         // this warp has read the stash
    namedSync(5 + c, 64);        // the chain's stores (and polls) precede the release (reset)
    if (w == 0) {
      if (kb == 0) *sem = 0;     // ready for the next launch
      else releaseIncrement(sem);
    }
  }
}
}  // namespace wg
}  // namespace fa

// ---- backward on wgmma, one pass with a dQ writer warpgroup: dk, dv and dq ----
// fa_backward_dkdv_wgmma's consumers (their block barriers named, 256 threads) with dQ = dS K
// per tile (dkdvTile<true>) handed to the writer warpgroup (the last 128 threads, dqWriter)
// through shared memory: the ordered add's round trips leave the consumers' critical path.
// setmaxnreg gives the consumers the writer's registers.
__device__ __forceinline__ void fa_backward_dkdv_wgmma_dqw(const fa_t* __restrict__ q, const fa_t* __restrict__ k,
                                                           const fa_t* __restrict__ v, const fa_t* __restrict__ o,
                                                           const fa_t* __restrict__ dO, const float* __restrict__ lse,
                                                           fa_t* __restrict__ dk, fa_t* __restrict__ dv,
                                                           fa_t* __restrict__ dq) {
  using namespace fa;
  char* smem = wg::alignedSmem();  // arrays at the generator's offsets (FA_SMEM_WG_*)
  char* dsT = smem + FA_SMEM_WG_DKDV_DS;  // dS^T of the block's 128 keys x BQ queries
  float4* stash = reinterpret_cast<float4*>(smem + FA_SMEM_WG_DKDV_DQ);    // [2][J][128]: the consumers' dQ halves
  float4* landing = reinterpret_cast<float4*>(smem + FA_SMEM_WG_DKDV_DQL);  // [2][J][128]: the sums, copied in
  const unsigned bars = smemAddr(smem + FA_SMEM_WG_DKDV_DQB), full = bars, empty = bars + 8;
  if (threadIdx.x == 0) {
    wg::mbarInit(full, FA_WARPS);  // each consumer warp, once its stash is written
    wg::mbarInit(empty, 4);        // each writer warp, once it has read the stash
  }
  __syncthreads();  // the barriers are initialised before anyone waits on them
  // The last key rows first: a query tile's dQ sum takes key blocks from the last down (addDq).
  const int z = blockIdx.x, k0 = (gridDim.y - 1 - blockIdx.y) * BR;
  const QueryWalk walk(k0);  // attention_mma.cuh
  if (threadIdx.x >= NT) {
    wg::producerRegisters();
    if (dq) wg::dqWriter(stash, landing, full, empty, walk, z, k0, dq);
    return;
  }
  wg::consumerRegisters();
  const unsigned kAddr = smemAddr(smem + FA_SMEM_WG_DKDV_K), vAddr = smemAddr(smem + FA_SMEM_WG_DKDV_V);
  const int wr = (threadIdx.x >> 7) * 64;
  float4* st = stash + (threadIdx.x >> 7) * 128 * (FA_D / 16) + (threadIdx.x & 127);
  auto tile = [&](float(&gk)[FA_D / 8][4], float(&gv)[FA_DV / 8][4], float(&gq)[FA_D / 16][4], unsigned qt,
                  unsigned gt, const float2* Rb, int it, int zq, int q0, int kw) {
    if (!dq) {
      wg::dkdvTile<false>(gk, gv, kAddr, vAddr, qt, gt, wr, Rb, q0, k0, kw, gq, nullptr);
      return;
    }
    wg::dkdvTile<true>(gk, gv, kAddr, vAddr, qt, gt, wr, Rb, q0, k0, kw, gq, dsT);
    if (it > 0) wg::mbarWait(empty, (it - 1) & 1);  // the writer has read the last tile's stash
#pragma unroll
    for (int j = 0; j < FA_D / 16; ++j) st[128 * j] = make_float4(gq[j][0], gq[j][1], gq[j][2], gq[j][3]);
    wg::warpReleases(full);
  };
  // The consumers' block barrier: named, 256 threads (the writer is not in it).
  wg::dkdvConsumers(smem, q, k, v, dO, dk, dv, z, k0, FaRope{}, [] { wg::namedSync(4, NT); }, tile);
}
#endif  // FA_BACKWARD && FA_WG_FUSED_DQ == 2

#if FA_BACKWARD && FA_WG_PRODUCER
// ---- backward on wgmma, pass 2 with a producer warpgroup: the same dk, dv ----
// fa_backward_dkdv_wgmma's arithmetic in the same order, with the copies of the query-side
// tiles (Q, dO and their row statistics) moved to a producer warpgroup (the last 128
// threads) and a ring of FA_WG_STAGES buffers behind full and empty mbarriers, as in
// fa_forward_wgmma_ws: the two consumer warpgroups (64 key rows each) no longer meet at a
// block barrier twice a query tile, and setmaxnreg gives them the producer's registers.
__device__ __forceinline__ void fa_backward_dkdv_wgmma_ws(const fa_t* __restrict__ q, const fa_t* __restrict__ k,
                                                          const fa_t* __restrict__ v, const fa_t* __restrict__ o,
                                                          const fa_t* __restrict__ dO, const float* __restrict__ lse,
                                                          fa_t* __restrict__ dk, fa_t* __restrict__ dv,
                                                          fa::FaRope rope = {}) {
  using namespace fa;
  constexpr int S = FA_WG_STAGES;
  char* smem = wg::alignedSmem();  // arrays at the generator's offsets (FA_SMEM_WG_DKS_*)
  fa_t* Ks = reinterpret_cast<fa_t*>(smem + FA_SMEM_WG_DKS_K);      // [BR][D] swizzled
  fa_t* Vs = reinterpret_cast<fa_t*>(smem + FA_SMEM_WG_DKS_V);      // [BR][DV]
  fa_t* Qs = reinterpret_cast<fa_t*>(smem + FA_SMEM_WG_DKS_Q);      // [S][BQ][D]
  fa_t* Gs = reinterpret_cast<fa_t*>(smem + FA_SMEM_WG_DKS_G);      // dO: [S][BQ][DV]
  float2* RS = reinterpret_cast<float2*>(smem + FA_SMEM_WG_DKS_RS);  // {D, L2}: [S][BQ]
  // full[S]: the producer's 128 threads arrive as their copies land; empty[S]: each consumer
  // warp arrives once its products have read the buffer.
  const unsigned bars = smemAddr(smem + FA_SMEM_WG_DKS_BAR);
  auto full = [&](int s) { return bars + 8 * s; };
  auto empty = [&](int s) { return bars + 8 * (S + s); };
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      wg::mbarInit(full(s), 128);
      wg::mbarInit(empty(s), FA_WARPS);
    }
  }
  __syncthreads();  // the barriers are initialised before anyone waits on them
  const int z = blockIdx.x, k0 = blockIdx.y * BR;  // causal: the first key rows have the most work
  const QueryWalk walk(k0);                        // attention_mma.cuh
  const int steps = walk.steps;
  if (threadIdx.x >= NT) {  // the producer
    wg::producerRegisters();
    const int p = threadIdx.x - NT;
    for (int it = 0; it < steps; ++it) {
      const int s = it % S, zq = walk.head(z, it), q0 = walk.q0(it);
      if (it >= S) wg::mbarWait(empty(s), ((it / S) - 1) & 1);
      wg::produceTile<BQ, FA_D, 128>(Qs + s * BQ * FA_D, q + fa_q_batch(zq), FA_Q_RS, q0, FA_TQ, p);
      wg::produceTile<BQ, FA_DV, 128>(Gs + s * BQ * FA_DV, dO + fa_do_batch(zq), FA_DO_RS, q0, FA_TQ, p);
      loadRowStats<BQ, 128>(RS + s * BQ, fa_rowstats + (long long)zq * FA_TQ, q0, p);
      wg::mbarArriveOnCopies(full(s));
    }
    wg::producerDone();
    return;
  }
  wg::consumerRegisters();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, c = warp >> 2, wr = c * 64;
  k += fa_k_batch(z * FA_GROUP);
  v += fa_v_batch(z * FA_GROUP);
  // Each consumer copies its own 64 key rows of K and V and waits for them alone.
  wg::loadRows<BR, FA_D, 64, 128>(Ks, k, FA_K_RS, k0, wr, FA_TK, threadIdx.x & 127);
  wg::loadRows<BR, FA_DV, 64, 128>(Vs, v, FA_V_RS, k0, wr, FA_TK, threadIdx.x & 127);
  wg::ownRowsLanded(c);
  const unsigned kAddr = smemAddr(Ks), vAddr = smemAddr(Vs), qAddr = smemAddr(Qs), gAddr = smemAddr(Gs);
  float gk[FA_D / 8][4], gv[FA_DV / 8][4];
  zero(gk);
  zero(gv);
  const int kw = k0 + warp * 16 + (lane >> 2);  // this thread's key rows: kw, kw + 8
  for (int it = 0; it < steps; ++it) {
    const int q0 = walk.q0(it), buf = it % S;
    wg::mbarWait(full(buf), (it / S) & 1);
    wg::proxyFence();  // the copies (generic proxy) are read next by the tensor cores (async proxy)
    const unsigned qt = qAddr + buf * BQ * FA_D * 2, gt = gAddr + buf * BQ * FA_DV * 2;
    float unused[FA_D / 16][4];
    wg::dkdvTile<false>(gk, gv, kAddr, vAddr, qt, gt, wr, RS + buf * BQ, q0, k0, kw, unused, nullptr);
    wg::warpReleases(empty(buf));  // this warp's products have read the buffer
  }
  if (dv) storeRows<FA_DV, FA_DV_OUT_RS>(dv + fa_dv_out(z), gv, k0 + warp * 16, FA_TK, 1.f);
  if (dk) storeRows<FA_D, FA_DK_OUT_RS>(dk + fa_dk_out(z), gk, k0 + warp * 16, FA_TK, FA_SCALE, rope.kc, rope.ks);
}
#endif  // FA_BACKWARD && FA_WG_PRODUCER
