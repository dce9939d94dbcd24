// uniform's random numbers (ir/ops.def): Philox4x32-10 (Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3", SC'11), a counter-based generator: the value for (counter,
// key, stream) is a pure function of the three, so a kernel regenerates any element's number
// without state, the backward regenerates the forward's dropout mask, and a step is
// reproducible from its key. One definition, written in the subset of C++ that CUDA shares:
// the interpreter calls it (fusec::fusec_uniform) and codegen pastes its text into the kernels
// that use it (uniformDeviceSource), so the CPU and the GPU draw the same numbers.
//
// Counter (the element's flat index, 64 bits; the stream) and key (64 bits) go through ten
// rounds; the first output word's top 24 bits give a float in [0, 1), exactly representable,
// so the result does not depend on rounding modes.
#pragma once

#define FUSEC_UNIFORM_FUNCTION                                                                  \
  float fusec_uniform(long long counter, long long key, long long stream) {                     \
    unsigned int c0 = (unsigned int)(unsigned long long)counter;                                \
    unsigned int c1 = (unsigned int)((unsigned long long)counter >> 32);                       \
    unsigned int c2 = (unsigned int)(unsigned long long)stream, c3 = 0u;                        \
    unsigned int k0 = (unsigned int)(unsigned long long)key;                                    \
    unsigned int k1 = (unsigned int)((unsigned long long)key >> 32);                           \
    for (int round = 0; round < 10; ++round) {                                                  \
      const unsigned long long p0 = (unsigned long long)0xD2511F53u * c0;                       \
      const unsigned long long p1 = (unsigned long long)0xCD9E8D57u * c2;                       \
      const unsigned int n0 = (unsigned int)(p1 >> 32) ^ c1 ^ k0;                               \
      const unsigned int n2 = (unsigned int)(p0 >> 32) ^ c3 ^ k1;                               \
      c1 = (unsigned int)p1;                                                                    \
      c3 = (unsigned int)p0;                                                                    \
      c0 = n0;                                                                                  \
      c2 = n2;                                                                                  \
      k0 += 0x9E3779B9u;                                                                        \
      k1 += 0xBB67AE85u;                                                                        \
    }                                                                                           \
    return (float)(c0 >> 8) * 5.9604644775390625e-08f;                                          \
  }

#define FUSEC_PHILOX_STRINGIZE2(...) #__VA_ARGS__
#define FUSEC_PHILOX_STRINGIZE(...) FUSEC_PHILOX_STRINGIZE2(__VA_ARGS__)

namespace fusec {

inline FUSEC_UNIFORM_FUNCTION

// The same function as CUDA source, for the kernels whose text calls fusec_uniform.
inline const char* uniformDeviceSource() {
  return "__device__ __forceinline__ " FUSEC_PHILOX_STRINGIZE(FUSEC_UNIFORM_FUNCTION) "\n";
}

}  // namespace fusec
