// The CUDA C++ templates of the attention family (codegen/attention_kernel.cpp fills in their
// constants): kept apart from the generator so each file has one job.
#pragma once

namespace fusec::codegen {

// fa_forward, fa_backward_dq, fa_backward_dkdv: SIMT (FFMA) flash attention for any element
// type (codegen/attention_simt.cpp).
const char* attentionSimtSource();

}  // namespace fusec::codegen
