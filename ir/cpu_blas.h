// An optimised BLAS for the interpreter's large GEMMs, when the machine has one: OpenBLAS or
// BLIS (Debian: libopenblas0-pthread, libblis4), opened at the first use (as fusec opens its
// GPU libraries), so that fusec neither links nor needs one. Double precision: the
// interpreter accumulates in double, and products of two floats are exact in double, so the
// sums differ from its own loop only in their order (rounded once to f32 afterwards: within
// fp32 rounding of it). FUSEC_CPU_BLAS=0 in the environment keeps the interpreter's own loop
// (A/B measurements).
#pragma once
#include <cstdint>
#include <string>

namespace fusec {

// The library's name ("libopenblas.so.0"), or "" when there is none (or FUSEC_CPU_BLAS=0).
const std::string& cpuBlasName();

// C[M x N] = A[M x K] * B[K x N], all row-major and contiguous (lda = K, ldb = ldc = N).
// False when no BLAS is there or a size does not fit its int arguments; C is then untouched.
bool cpuDgemm(int64_t M, int64_t N, int64_t K, const double* A, const double* B, double* C);

}  // namespace fusec
