// The CUDA C++ of the SIMT flash-attention kernels (f32 FFMA arithmetic, any element type):
// forward, and the backward's dQ and dK/dV passes. The text is a template over constants the
// generator defines first (codegen/attention_kernel.cpp): FA_BACKWARD (which functions), FA_GROUP (query heads a
// key/value head: grouped-query attention), the element type fa_t, the widths
// FA_D, FA_DV, the lengths FA_TQ, FA_TK, FA_CAUSAL, the scale, and per operand its batch
// offset fa_<x>_batch(z) and row stride FA_<X>_RS (strides are static, so views such as q,
// k, v straight from the fused QKV GEMM's output need no copy).
//
// FlashAttention-2's algorithm: a block owns 64 query rows (forward, dQ) or 64 key rows
// (dK/dV) and walks the tiles of the other side through shared memory; the softmax is
// online (running max and sum in registers, log2 domain), causal tiles beyond the diagonal
// are skipped, and P never leaves the chip. 128 threads as 16 x 8: a thread computes 4 rows x
// 8 columns of each 64 x 64 score tile (columns tx + 8j, so the 8 threads of a row are
// adjacent lanes and row reductions are 3 shuffles) and 4 rows x D/8 columns of each output
// (contiguous chunks, so shared-memory reads are 16-byte vectors). Shared tiles are f32,
// row-major with 4 floats of padding per row (no bank conflicts on the vector reads).
//
// The backward is deterministic: no atomics. dQ is its own pass over the key tiles of a
// query tile; dK and dV are summed over the query tiles of a key tile. D = rowsum(dO o) is
// recomputed per query tile in each pass (O(N d), no scratch buffer in the kernel ABI).
//
// codegen/attention_kernel.cpp defines the constants this text reads, then appends it; the
// generator's source is that text from the line after the marker below.
// ---- the text below is what the kernels' sources embed (cmake/embed_cuh.cmake) ----

namespace fa {

// NVRTC has no math.h, so no INFINITY.
#define FA_NEG_INF (-__int_as_float(0x7f800000))

constexpr int BR = 64, BC = 64, NT = 128;
constexpr float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;
constexpr int PAD = 4;
constexpr int LD = FA_D + PAD, LDV = FA_DV + PAD, LDT = BC + PAD;  // row pitches (floats)
// Output columns a thread owns: VEC-wide chunks at VEC * tx + 8 * VEC * j.
constexpr int VEC = FA_D % 32 == 0 ? 4 : FA_D % 16 == 0 ? 2 : 1;
constexpr int VECV = FA_DV % 32 == 0 ? 4 : FA_DV % 16 == 0 ? 2 : 1;
constexpr int CH = FA_D / (8 * VEC), CHV = FA_DV / (8 * VECV);
static_assert(FA_D % 8 == 0 && FA_DV % 8 == 0, "head dims are multiples of 8");

__device__ __forceinline__ float ld(float x) { return x; }
__device__ __forceinline__ float ld(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float ld(__half x) { return __half2float(x); }
template <class T> __device__ __forceinline__ T cvt(float x);
template <> __device__ __forceinline__ float cvt<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 cvt<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half cvt<__half>(float x) { return __float2half_rn(x); }

// rows [r0, r0 + R) of a [*, W] operand (row stride rs elements) into a shared [R][W + PAD]
// tile; rows at or past `limit` are zero.
template <int R, int W>
__device__ __forceinline__ void loadTile(float* dst, const fa_t* src, long long rs, int r0, int limit) {
  for (int e = threadIdx.x; e < R * W; e += NT) {
    const int r = e / W, c = e % W;
    dst[r * (W + PAD) + c] = r0 + r < limit ? ld(src[(long long)(r0 + r) * rs + c]) : 0.f;
  }
}

// acc[i][j] += sum_c A[ty*4+i][c] * B[tx+8j][c]: a 64 x 64 tile of A B^T over width W.
template <int W>
__device__ __forceinline__ void tileABt(float (&acc)[4][8], const float* A, const float* B) {
  const int tx = threadIdx.x & 7, ty = threadIdx.x >> 3;
  constexpr int L = W + PAD;
#pragma unroll 4
  for (int c = 0; c < W; c += 4) {
    float4 a[4], b[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = *reinterpret_cast<const float4*>(A + (ty * 4 + i) * L + c);
#pragma unroll
    for (int j = 0; j < 8; ++j) b[j] = *reinterpret_cast<const float4*>(B + (tx + 8 * j) * L + c);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        acc[i][j] = fmaf(a[i].x, b[j].x, acc[i][j]);
        acc[i][j] = fmaf(a[i].y, b[j].y, acc[i][j]);
        acc[i][j] = fmaf(a[i].z, b[j].z, acc[i][j]);
        acc[i][j] = fmaf(a[i].w, b[j].w, acc[i][j]);
      }
  }
}

// acc[i][.] += sum_k P[ty*4+i][k] * V[k][cols]: rows of a [64][BC] tile times a [BC][W] tile,
// the thread's columns being CW chunks of VW at VW * tx + 8 * VW * j.
template <int W, int VW, int CW>
__device__ __forceinline__ void tileAB(float (&acc)[4][CW * VW], const float* P, const float* V) {
  const int tx = threadIdx.x & 7, ty = threadIdx.x >> 3;
  constexpr int L = W + PAD;
#pragma unroll 2
  for (int k = 0; k < BC; k += 4) {
    float4 p[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = *reinterpret_cast<const float4*>(P + (ty * 4 + i) * LDT + k);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      float v[CW * VW];
#pragma unroll
      for (int j = 0; j < CW; ++j) {
        const float* src = V + (k + u) * L + VW * tx + 8 * VW * j;
        if constexpr (VW == 4) {
          float4 t = *reinterpret_cast<const float4*>(src);
          v[j * 4] = t.x, v[j * 4 + 1] = t.y, v[j * 4 + 2] = t.z, v[j * 4 + 3] = t.w;
        } else if constexpr (VW == 1) {
          v[j] = *src;
        } else {
          float2 t = *reinterpret_cast<const float2*>(src);
          v[j * 2] = t.x, v[j * 2 + 1] = t.y;
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float pu = u == 0 ? p[i].x : u == 1 ? p[i].y : u == 2 ? p[i].z : p[i].w;
#pragma unroll
        for (int c = 0; c < CW * VW; ++c) acc[i][c] = fmaf(pu, v[c], acc[i][c]);
      }
    }
  }
}

__device__ __forceinline__ float rowMax8(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
}
__device__ __forceinline__ float rowSum8(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x + __shfl_xor_sync(0xffffffffu, x, 4);
}

// Whether query row `qi` sees key `kj` (both in range).
__device__ __forceinline__ bool visible(int qi, int kj) {
  return qi < FA_TQ && kj < FA_TK && (!FA_CAUSAL || kj <= qi + (FA_TK - FA_TQ));
}

#if FA_BACKWARD
// D[r] = sum_d dO[r][d] o[r][d] and L2[r] = lse[r] * log2(e) for rows [q0, q0 + BR):
// two threads per row, each half the columns.
__device__ __forceinline__ void rowStats(float* D, float* L2, const fa_t* o, const fa_t* dO, const float* lse, int q0) {
  const int r = threadIdx.x >> 1, half = threadIdx.x & 1, row = q0 + r;
  float s = 0.f;
  if (row < FA_TQ)
    for (int c = half; c < FA_DV; c += 2) s = fmaf(ld(o[(long long)row * FA_O_RS + c]), ld(dO[(long long)row * FA_DO_RS + c]), s);
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  if (half == 0) {
    D[r] = s;
    L2[r] = row < FA_TQ ? lse[row] * LOG2E : 0.f;
  }
}

#endif  // FA_BACKWARD

}  // namespace fa

#if !FA_BACKWARD
// ---- forward: o = softmax(q k^T scale) v, lse ----
__device__ __forceinline__ void fa_forward(const fa_t* __restrict__ q, const fa_t* __restrict__ k,
                                           const fa_t* __restrict__ v, fa_t* __restrict__ o, float* __restrict__ lse) {
  using namespace fa;
  extern __shared__ float4 fa_smem4[];
  char* smem = reinterpret_cast<char*>(fa_smem4);  // arrays at the generator's offsets (FA_SMEM_*)
  float* Qs = reinterpret_cast<float*>(smem + FA_SMEM_FWD_Q);  // [BR][LD]
  float* Ks = reinterpret_cast<float*>(smem + FA_SMEM_FWD_K);  // [BC][LD]
  float* Vs = reinterpret_cast<float*>(smem + FA_SMEM_FWD_V);  // [BC][LDV]
  float* Ps = reinterpret_cast<float*>(smem + FA_SMEM_FWD_P);  // [BR][LDT]
  const int tx = threadIdx.x & 7, ty = threadIdx.x >> 3;
  // The longest causal rows first: block x takes query tile (tiles - 1 - x).
  const int z = blockIdx.y, q0 = (gridDim.x - 1 - blockIdx.x) * BR;
  q += fa_q_batch(z);
  k += fa_k_batch(z);
  v += fa_v_batch(z);
  loadTile<BR, FA_D>(Qs, q, FA_Q_RS, q0, FA_TQ);
  float m[4], l[4], acc[4][CHV * VECV];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = FA_NEG_INF, l[i] = 0.f;
#pragma unroll
    for (int c = 0; c < CHV * VECV; ++c) acc[i][c] = 0.f;
  }
  const int tiles = keyTiles<BR, BC>(q0);  // attention_common.cuh
  for (int t = 0; t < tiles; ++t) {
    const int k0 = t * BC;
    __syncthreads();  // the previous tile's K, V, P are consumed
    loadTile<BC, FA_D>(Ks, k, FA_K_RS, k0, FA_TK);
    loadTile<BC, FA_DV>(Vs, v, FA_V_RS, k0, FA_TK);
    __syncthreads();
    float s[4][8];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) s[i][j] = 0.f;
    tileABt<FA_D>(s, Qs, Ks);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int qi = q0 + ty * 4 + i;
      float mx = FA_NEG_INF;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        s[i][j] = visible(qi, k0 + tx + 8 * j) ? s[i][j] * FA_SCALE_LOG2 : FA_NEG_INF;
        mx = fmaxf(mx, s[i][j]);
      }
      const float mNew = fmaxf(m[i], rowMax8(mx));
      const float base = mNew == FA_NEG_INF ? 0.f : mNew;  // a row with nothing visible yet
      const float alpha = exp2f(m[i] - base);
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float p = exp2f(s[i][j] - base);
        sum += p;
        Ps[(ty * 4 + i) * LDT + tx + 8 * j] = p;
      }
      l[i] = l[i] * alpha + rowSum8(sum);
      m[i] = mNew;
#pragma unroll
      for (int c = 0; c < CHV * VECV; ++c) acc[i][c] *= alpha;
    }
    __syncthreads();
    tileAB<FA_DV, VECV, CHV>(acc, Ps, Vs);
  }
  const long long ob = (long long)z * FA_TQ;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int qi = q0 + ty * 4 + i;
    if (qi >= FA_TQ) continue;
    const float inv = 1.f / l[i];  // l = 0 (nothing visible) gives NaN, as softmax over -inf
    if (o)
#pragma unroll
      for (int j = 0; j < CHV; ++j)
#pragma unroll
        for (int e = 0; e < VECV; ++e)
          o[fa_out_batch(z) + (long long)qi * FA_OUT_RS + VECV * tx + 8 * VECV * j + e] = cvt<fa_t>(acc[i][j * VECV + e] * inv);
    if (lse && tx == 0) lse[ob + qi] = l[i] == 0.f ? FA_NEG_INF : (m[i] + log2f(l[i])) * LN2;
  }
}

#else  // FA_BACKWARD
// ---- backward, pass 1: dq for a block of 64 query rows ----
__device__ __forceinline__ void fa_backward_dq(const fa_t* __restrict__ q, const fa_t* __restrict__ k,
                                               const fa_t* __restrict__ v, const fa_t* __restrict__ o,
                                               const fa_t* __restrict__ dO, const float* __restrict__ lse,
                                               fa_t* __restrict__ dq) {
  using namespace fa;
  extern __shared__ float4 fa_smem4[];
  char* smem = reinterpret_cast<char*>(fa_smem4);  // arrays at the generator's offsets (FA_SMEM_*)
  float* Qs = reinterpret_cast<float*>(smem + FA_SMEM_DQ_Q);  // [BR][LD]
  float* Gs = reinterpret_cast<float*>(smem + FA_SMEM_DQ_G);  // dO: [BR][LDV]
  float* Ks = reinterpret_cast<float*>(smem + FA_SMEM_DQ_K);  // [BC][LD]
  float* Vs = reinterpret_cast<float*>(smem + FA_SMEM_DQ_V);  // [BC][LDV]
  float* Ss = reinterpret_cast<float*>(smem + FA_SMEM_DQ_S);  // dS: [BR][LDT]
  float* D = reinterpret_cast<float*>(smem + FA_SMEM_DQ_D);   // [BR]
  float* L2 = reinterpret_cast<float*>(smem + FA_SMEM_DQ_L2);  // [BR]
  const int tx = threadIdx.x & 7, ty = threadIdx.x >> 3;
  const int z = blockIdx.y, q0 = (gridDim.x - 1 - blockIdx.x) * BR;
  q += fa_q_batch(z);
  k += fa_k_batch(z);
  v += fa_v_batch(z);
  o += fa_o_batch(z);
  dO += fa_do_batch(z);
  lse += fa_lse_batch(z);
  loadTile<BR, FA_D>(Qs, q, FA_Q_RS, q0, FA_TQ);
  loadTile<BR, FA_DV>(Gs, dO, FA_DO_RS, q0, FA_TQ);
  rowStats(D, L2, o, dO, lse, q0);
  float acc[4][CH * VEC];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int c = 0; c < CH * VEC; ++c) acc[i][c] = 0.f;
  const int tiles = keyTiles<BR, BC>(q0);  // attention_common.cuh
  for (int t = 0; t < tiles; ++t) {
    const int k0 = t * BC;
    __syncthreads();
    loadTile<BC, FA_D>(Ks, k, FA_K_RS, k0, FA_TK);
    loadTile<BC, FA_DV>(Vs, v, FA_V_RS, k0, FA_TK);
    __syncthreads();
    float s[4][8], dp[4][8];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) s[i][j] = 0.f, dp[i][j] = 0.f;
    tileABt<FA_D>(s, Qs, Ks);
    tileABt<FA_DV>(dp, Gs, Vs);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = ty * 4 + i, qi = q0 + r;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float p = visible(qi, k0 + tx + 8 * j) ? exp2f(s[i][j] * FA_SCALE_LOG2 - L2[r]) : 0.f;
        Ss[r * LDT + tx + 8 * j] = p * (dp[i][j] - D[r]) * FA_SCALE;
      }
    }
    __syncthreads();
    tileAB<FA_D, VEC, CH>(acc, Ss, Ks);
  }
  const long long ob = (long long)z * FA_TQ;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int qi = q0 + ty * 4 + i;
    if (qi >= FA_TQ) continue;
#pragma unroll
    for (int j = 0; j < CH; ++j)
#pragma unroll
      for (int e = 0; e < VEC; ++e) dq[(ob + qi) * FA_D + VEC * tx + 8 * VEC * j + e] = cvt<fa_t>(acc[i][j * VEC + e]);
  }
}

// ---- backward, pass 2: dk, dv for a block of 64 key rows ----
__device__ __forceinline__ void fa_backward_dkdv(const fa_t* __restrict__ q, const fa_t* __restrict__ k,
                                                 const fa_t* __restrict__ v, const fa_t* __restrict__ o,
                                                 const fa_t* __restrict__ dO, const float* __restrict__ lse,
                                                 fa_t* __restrict__ dk, fa_t* __restrict__ dv) {
  using namespace fa;
  extern __shared__ float4 fa_smem4[];
  char* smem = reinterpret_cast<char*>(fa_smem4);  // arrays at the generator's offsets (FA_SMEM_*)
  float* Ks = reinterpret_cast<float*>(smem + FA_SMEM_DKDV_K);   // [BC][LD]
  float* Vs = reinterpret_cast<float*>(smem + FA_SMEM_DKDV_V);   // [BC][LDV]
  float* Qs = reinterpret_cast<float*>(smem + FA_SMEM_DKDV_Q);   // [BR][LD]
  float* Gs = reinterpret_cast<float*>(smem + FA_SMEM_DKDV_G);   // dO: [BR][LDV]
  float* Ps = reinterpret_cast<float*>(smem + FA_SMEM_DKDV_P);   // P^T: [BC][LDT]
  float* Ss = reinterpret_cast<float*>(smem + FA_SMEM_DKDV_S);   // dS^T: [BC][LDT]
  float* D = reinterpret_cast<float*>(smem + FA_SMEM_DKDV_D);    // [BR]
  float* L2 = reinterpret_cast<float*>(smem + FA_SMEM_DKDV_L2);  // [BR]
  const int tx = threadIdx.x & 7, ty = threadIdx.x >> 3;
  // z is the key/value batch index; grouped-query attention's FA_GROUP query heads read it
  // and add their contributions to dK, dV in registers, one head after the other.
  const int z = blockIdx.y, k0 = blockIdx.x * BC;
  k += fa_k_batch(z * FA_GROUP);
  v += fa_v_batch(z * FA_GROUP);
  loadTile<BC, FA_D>(Ks, k, FA_K_RS, k0, FA_TK);
  loadTile<BC, FA_DV>(Vs, v, FA_V_RS, k0, FA_TK);
  float gk[4][CH * VEC], gv[4][CHV * VECV];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int c = 0; c < CH * VEC; ++c) gk[i][c] = 0.f;
#pragma unroll
    for (int c = 0; c < CHV * VECV; ++c) gv[i][c] = 0.f;
  }
  // Causal: query rows before k0 - (TK - TQ) see none of these keys.
  const int first = FA_CAUSAL ? max(0, k0 - (FA_TK - FA_TQ)) / BR : 0;
  const int tiles = (FA_TQ + BR - 1) / BR;
  for (int it = 0; it < FA_GROUP * (tiles - first); ++it) {
    const int zq = z * FA_GROUP + it / (tiles - first), q0 = (first + it % (tiles - first)) * BR;
    const fa_t* qz = q + fa_q_batch(zq);
    const fa_t* gz = dO + fa_do_batch(zq);
    __syncthreads();
    loadTile<BR, FA_D>(Qs, qz, FA_Q_RS, q0, FA_TQ);
    loadTile<BR, FA_DV>(Gs, gz, FA_DO_RS, q0, FA_TQ);
    rowStats(D, L2, o + fa_o_batch(zq), gz, lse + fa_lse_batch(zq), q0);
    __syncthreads();
    float s[4][8], dp[4][8];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) s[i][j] = 0.f, dp[i][j] = 0.f;
    tileABt<FA_D>(s, Ks, Qs);   // S^T: rows keys, columns queries
    tileABt<FA_DV>(dp, Vs, Gs); // dP^T
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = ty * 4 + i, kj = k0 + r;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int c = tx + 8 * j;
        const float p = visible(q0 + c, kj) ? exp2f(s[i][j] * FA_SCALE_LOG2 - L2[c]) : 0.f;
        Ps[r * LDT + c] = p;
        Ss[r * LDT + c] = p * (dp[i][j] - D[c]) * FA_SCALE;
      }
    }
    __syncthreads();
    tileAB<FA_DV, VECV, CHV>(gv, Ps, Gs);
    tileAB<FA_D, VEC, CH>(gk, Ss, Qs);
  }
  const long long ob = (long long)z * FA_TK;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int kj = k0 + ty * 4 + i;
    if (kj >= FA_TK) continue;
    if (dk)
#pragma unroll
      for (int j = 0; j < CH; ++j)
#pragma unroll
        for (int e = 0; e < VEC; ++e) dk[(ob + kj) * FA_D + VEC * tx + 8 * VEC * j + e] = cvt<fa_t>(gk[i][j * VEC + e]);
    if (dv)
#pragma unroll
    for (int j = 0; j < CHV; ++j)
#pragma unroll
      for (int e = 0; e < VECV; ++e)
        dv[(ob + kj) * FA_DV + VECV * tx + 8 * VECV * j + e] = cvt<fa_t>(gv[i][j * VECV + e]);
  }
}
#endif  // FA_BACKWARD
