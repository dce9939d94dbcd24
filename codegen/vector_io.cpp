#include "codegen/vector_io.h"

#include <algorithm>
#include <set>

#include "codegen/scalar_ops.h"

namespace fusec::codegen {

std::string vectorPrelude() {
  // One 16-byte access per fusec_ld16/fusec_st16; bf16 -> f32 is exact as a shift of the
  // bits (NaN kept), so it needs no conversion intrinsic.
  return R"(__device__ __forceinline__ void fusec_ld16(float* d, const float* p) {
  const float4 u = *reinterpret_cast<const float4*>(p);
  d[0] = u.x; d[1] = u.y; d[2] = u.z; d[3] = u.w;
}
__device__ __forceinline__ void fusec_unpack2(float* d, unsigned w, const __nv_bfloat16*) {
  d[0] = __uint_as_float(w << 16); d[1] = __uint_as_float(w & 0xffff0000u);
}
__device__ __forceinline__ void fusec_unpack2(float* d, unsigned w, const __half*) {
  d[0] = __half2float(__ushort_as_half((unsigned short)(w & 0xffffu)));
  d[1] = __half2float(__ushort_as_half((unsigned short)(w >> 16)));
}
template <class T> __device__ __forceinline__ void fusec_ld16(float* d, const T* p) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  fusec_unpack2(d, u.x, p); fusec_unpack2(d + 2, u.y, p); fusec_unpack2(d + 4, u.z, p); fusec_unpack2(d + 6, u.w, p);
}
template <class T> __device__ __forceinline__ void fusec_ld8(float* d, const T* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  fusec_unpack2(d, u.x, p); fusec_unpack2(d + 2, u.y, p);
}
__device__ __forceinline__ void fusec_st16(float* p, const float* s) {
  *reinterpret_cast<float4*>(p) = make_float4(s[0], s[1], s[2], s[3]);
}
__device__ __forceinline__ unsigned fusec_pack2(const float* s, __nv_bfloat16*) {
  return (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(s[0])) | ((unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(s[1])) << 16);
}
__device__ __forceinline__ unsigned fusec_pack2(const float* s, __half*) {
  return (unsigned)__half_as_ushort(__float2half_rn(s[0])) | ((unsigned)__half_as_ushort(__float2half_rn(s[1])) << 16);
}
template <class T> __device__ __forceinline__ void fusec_st16(T* p, const float* s) {
  *reinterpret_cast<uint4*>(p) = make_uint4(fusec_pack2(s, p), fusec_pack2(s + 2, p), fusec_pack2(s + 4, p), fusec_pack2(s + 6, p));
}
template <class T> __device__ __forceinline__ void fusec_st8(T* p, const float* s) {
  *reinterpret_cast<uint2*>(p) = make_uint2(fusec_pack2(s, p), fusec_pack2(s + 2, p));
}
__device__ __forceinline__ float fusec_f32(float x) { return x; }
__device__ __forceinline__ float fusec_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float fusec_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ void fusec_put(float* p, float x) { *p = x; }
__device__ __forceinline__ void fusec_put(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }
__device__ __forceinline__ void fusec_put(__half* p, float x) { *p = __float2half_rn(x); }
// V elements: 16-byte accesses, an 8-byte one for a last four 16-bit elements (a row of f32
// and bf16 arrays at four elements a thread), and element by element for the rest (a
// col_reduce of 2 f32 columns per thread once loaded nothing at all).
template <int V, class T> __device__ __forceinline__ void fusec_vload(float* d, const T* p) {
  constexpr int E = 16 / sizeof(T), R = V / E * E, H = sizeof(T) == 2 && V - R >= 4 ? 4 : 0;
#pragma unroll
  for (int q = 0; q < V / E; ++q) fusec_ld16(d + q * E, p + q * E);
  if constexpr (H > 0) fusec_ld8(d + R, p + R);
#pragma unroll
  for (int k = R + H; k < V; ++k) d[k] = fusec_f32(p[k]);
}
// 16-bit elements kept packed, two to a register (element i in the low half when i is even):
// V of them (V a multiple of 4) loaded as raw 16-byte vectors, then an 8-byte one for a last
// four; one read as f32.
template <int V, class T> __device__ __forceinline__ void fusec_vload_packed(unsigned* d, const T* p) {
#pragma unroll
  for (int q = 0; q < V / 8; ++q) {
    const uint4 u = *reinterpret_cast<const uint4*>(p + q * 8);
    d[q * 4] = u.x; d[q * 4 + 1] = u.y; d[q * 4 + 2] = u.z; d[q * 4 + 3] = u.w;
  }
  constexpr int R = V / 8 * 8;
  if constexpr (V - R >= 4) {
    const uint2 u = *reinterpret_cast<const uint2*>(p + R);
    d[R / 2] = u.x; d[R / 2 + 1] = u.y;
  }
}
__device__ __forceinline__ unsigned fusec_pack_raw(__nv_bfloat16 a, __nv_bfloat16 b) {
  return (unsigned)__bfloat16_as_ushort(a) | ((unsigned)__bfloat16_as_ushort(b) << 16);
}
__device__ __forceinline__ unsigned fusec_pack_raw(__half a, __half b) {
  return (unsigned)__half_as_ushort(a) | ((unsigned)__half_as_ushort(b) << 16);
}
__device__ __forceinline__ float fusec_elem(const unsigned* r, int i, const __nv_bfloat16*) {
  return __uint_as_float(i & 1 ? r[i >> 1] & 0xffff0000u : r[i >> 1] << 16);
}
__device__ __forceinline__ float fusec_elem(const unsigned* r, int i, const __half*) {
  return __half2float(__ushort_as_half((unsigned short)(i & 1 ? r[i >> 1] >> 16 : r[i >> 1] & 0xffffu)));
}
template <int V, class T> __device__ __forceinline__ void fusec_vstore(T* p, const float* s) {
  constexpr int E = 16 / sizeof(T), R = V / E * E, H = sizeof(T) == 2 && V - R >= 4 ? 4 : 0;
#pragma unroll
  for (int q = 0; q < V / E; ++q) fusec_st16(p + q * E, s + q * E);
  if constexpr (H > 0) fusec_st8(p + R, s + R);
#pragma unroll
  for (int k = R + H; k < V; ++k) fusec_put(p + k, s[k]);
}
)";
}

std::vector<const Value*> inputsReadInPlace(const Graph& body, const std::vector<const Value*>& roots) {
  std::set<const Value*> seen;
  std::vector<const Value*> stack(roots.begin(), roots.end());
  while (!stack.empty()) {
    const Value* v = stack.back();
    stack.pop_back();
    if (!seen.insert(v).second) continue;
    const Op& op = *v->def;
    if (op.kind == OpKind::Reshape || (hasScalarFormula(op.kind) && op.kind != OpKind::Gather))
      for (const Value* o : op.operands) stack.push_back(o);
  }
  std::vector<const Value*> out;
  for (const Op* in : body.inputs())
    if (seen.count(in->result()) && isFloat(in->result()->type.dtype)) out.push_back(in->result());
  return out;
}

int vectorWidth(const std::vector<DType>& dtypes) {
  if (dtypes.empty()) return 0;
  int smallest = 4;
  for (DType d : dtypes) smallest = std::min(smallest, d == DType::f32 ? 4 : 2);
  return 16 / smallest;
}

int coalescedWidth(const std::vector<DType>& dtypes) {
  if (dtypes.empty()) return 0;
  int largest = 2;
  for (DType d : dtypes) largest = std::max(largest, d == DType::f32 ? 4 : 2);
  return 16 / largest;
}

std::string alignedTest(const std::vector<std::string>& pointers) {
  std::string s;
  for (const auto& p : pointers) s += (s.empty() ? "" : " | ") + std::string("(unsigned long long)") + p;
  return "((" + s + ") & 15ULL) == 0";
}

std::string inputPointer(const Graph& body, const Value* input) {
  const auto ins = body.inputs();
  return "in" + std::to_string(std::find(ins.begin(), ins.end(), input->def) - ins.begin());
}

std::string rowSharedPrelude() {
  return R"(
template <int W> __device__ __forceinline__ void fusec_words_put(unsigned* s, const unsigned* r) {
#pragma unroll
  for (int q = 0; q < W; q += 4) *reinterpret_cast<uint4*>(s + q) = make_uint4(r[q], r[q + 1], r[q + 2], r[q + 3]);
}
template <int W> __device__ __forceinline__ void fusec_words_put(unsigned* s, const float* r) {
#pragma unroll
  for (int q = 0; q < W; q += 4)
    *reinterpret_cast<uint4*>(s + q) = make_uint4(__float_as_uint(r[q]), __float_as_uint(r[q + 1]),
                                                  __float_as_uint(r[q + 2]), __float_as_uint(r[q + 3]));
}
template <int W> __device__ __forceinline__ void fusec_words_get(unsigned* r, const unsigned* s) {
#pragma unroll
  for (int q = 0; q < W; q += 4) {
    const uint4 u = *reinterpret_cast<const uint4*>(s + q);
    r[q] = u.x; r[q + 1] = u.y; r[q + 2] = u.z; r[q + 3] = u.w;
  }
}
template <int W> __device__ __forceinline__ void fusec_words_get(float* r, const unsigned* s) {
#pragma unroll
  for (int q = 0; q < W; q += 4) {
    const uint4 u = *reinterpret_cast<const uint4*>(s + q);
    r[q] = __uint_as_float(u.x); r[q + 1] = __uint_as_float(u.y); r[q + 2] = __uint_as_float(u.z); r[q + 3] = __uint_as_float(u.w);
  }
}
)";
}

}  // namespace fusec::codegen
