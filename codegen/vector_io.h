// 16-byte vector loads and stores of dense operands, shared by the element-wise and the
// row-reduction kernels. A kernel's operands may be views at any element offset, so the
// alignment of a pointer is only known at run time: kernels emit the vector path and the
// scalar path and pick one with a single uniform test over every vectorised pointer.
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"

namespace fusec::codegen {

// fusec_vload<V>(float* dst, const T* p) / fusec_vstore<V>(T* p, const float* src): V
// consecutive elements (T = float, __nv_bfloat16, __half; p aligned to V * sizeof(T) up to
// 16 bytes) to or from float registers, in 16-byte accesses and an 8-byte one for a last four
// 16-bit elements; stores round to nearest even.
// fusec_vload_packed<V>(unsigned* dst, const T* p) keeps V (a multiple of 4) 16-bit elements packed two
// to a register; fusec_elem(dst, i, p) reads element i as f32; fusec_pack_raw(a, b) packs two.
std::string vectorPrelude();

// Body inputs whose elements are read at the row-major position the roots are evaluated at:
// reached from `roots` through pointwise ops and reshapes only (a broadcast, permute, slice,
// concat or gather reads elsewhere). Float inputs only; in body input order.
std::vector<const Value*> inputsReadInPlace(const Graph& body, const std::vector<const Value*>& roots);

// The elements per thread that make every access a whole number of 16-byte vectors: 16 over
// the smallest element size among `dtypes` (all float). 0 when `dtypes` is empty.
int vectorWidth(const std::vector<DType>& dtypes);

// The elements per thread that make every access of a warp contiguous: 16 over the largest
// element size (4 when f32 meets bf16, whose accesses are then 8 bytes a thread). With
// vectorWidth's 8, a warp's f32 accesses were two 16-byte halves of 32-byte strides, each
// touching twice the sectors it used: 1.6 of medium's 27 us rmsnorm backward (H200).
int coalescedWidth(const std::vector<DType>& dtypes);

// fusec_words_put<W>(s, r) / fusec_words_get<W>(r, s): W 32-bit words (a multiple of 4) of a
// register array (unsigned or float) to and from shared memory, 16 bytes at a time: a row
// kernel's row staged in shared memory (reduce_kernels.cpp, RowRegisters::shared).
std::string rowSharedPrelude();

// `((unsigned long long)p | ...) & 15) == 0` over the named pointers.
std::string alignedTest(const std::vector<std::string>& pointers);

// The operand pointer (`in<k>`) of a body input.
std::string inputPointer(const Graph& body, const Value* input);

}  // namespace fusec::codegen
