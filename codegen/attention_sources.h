// The CUDA C++ templates of the attention family (codegen/attention_kernel.cpp fills in their
// constants): codegen/attention_simt.cuh and attention_mma.cuh, embedded at build time
// (cmake/embed_cuh.cmake), so the CUDA lives in CUDA files and the generator in C++.
#pragma once

namespace fusec::codegen {

// What both templates read (codegen/attention_common.cuh), emitted before either.
const char* attentionCommonSource();

// fa_forward, fa_backward_dq, fa_backward_dkdv: SIMT (FFMA) flash attention for any element
// type (codegen/attention_simt.cuh).
const char* attentionSimtSource();

// The same entry points on tensor cores (mma.sync m16n8k16, bf16 in, f32 accumulation), for
// bf16 operands, equal head dims that are multiples of 16 up to 128, and operand rows that
// are 16-byte aligned (codegen/attention_mma.cuh).
const char* attentionMmaSource();

// fa_forward_wgmma: the bf16 forward on Hopper's warpgroup MMA, appended after the mma text
// whose helpers it uses (codegen/attention_wgmma.cuh).
const char* attentionWgmmaSource();

}  // namespace fusec::codegen
