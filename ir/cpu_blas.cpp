#include "ir/cpu_blas.h"

#include <dlfcn.h>

#include <climits>
#include <cstdlib>

#include "support/env.h"

namespace fusec {
namespace {

// cblas_dgemm's signature (cblas.h), with CBLAS's enum values: no header needed.
using Dgemm = void (*)(int order, int transA, int transB, int M, int N, int K, double alpha, const double* A, int lda,
                       const double* B, int ldb, double beta, double* C, int ldc);
constexpr int kRowMajor = 101, kNoTrans = 111;

struct Blas {
  Dgemm dgemm = nullptr;
  std::string name;
};

const Blas& blas() {
  static const Blas b = [] {
    Blas out;
    if (!envSwitch("FUSEC_CPU_BLAS", true)) return out;
    for (const char* lib : {"libopenblas.so.0", "libblis.so.4"}) {
      void* h = ::dlopen(lib, RTLD_NOW | RTLD_LOCAL);
      if (!h) continue;
      if (auto f = reinterpret_cast<Dgemm>(::dlsym(h, "cblas_dgemm"))) {
        out.dgemm = f;
        out.name = lib;
        return out;  // kept open for the process
      }
      ::dlclose(h);
    }
    return out;
  }();
  return b;
}

}  // namespace

const std::string& cpuBlasName() { return blas().name; }

bool cpuDgemm(int64_t M, int64_t N, int64_t K, const double* A, const double* B, double* C) {
  const Blas& b = blas();
  if (!b.dgemm || M > INT_MAX || N > INT_MAX || K > INT_MAX) return false;
  b.dgemm(kRowMajor, kNoTrans, kNoTrans, int(M), int(N), int(K), 1.0, A, int(K), B, int(N), 0.0, C, int(N));
  return true;
}

}  // namespace fusec
