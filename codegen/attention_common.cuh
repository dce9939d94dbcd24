// The device code both attention templates share (codegen/attention_simt.cuh and
// attention_mma.cuh, which differ in their tiles): codegen/attention_kernel.cpp emits it after
// the constants it reads (FA_TQ, FA_TK, FA_CAUSAL) and before the template.
// ---- the text below is what the kernels' sources embed (cmake/embed_cuh.cmake) ----

namespace fa {

// Key tiles of C keys a block of R query rows [q0, q0 + R) needs: causal stops after the
// diagonal (the queries are the last FA_TQ of the FA_TK positions).
template <int R, int C>
__device__ __forceinline__ int keyTiles(int q0) {
  int keys = FA_TK;
  if (FA_CAUSAL) {
    const int last = min(q0 + R, FA_TQ) - 1 + (FA_TK - FA_TQ) + 1;
    keys = max(0, min(keys, last));
  }
  return (keys + C - 1) / C;
}

}  // namespace fa
