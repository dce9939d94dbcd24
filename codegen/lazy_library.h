// A CUDA library that fusec opens at its first use instead of linking it. Linked, cuBLASLt
// alone cost every fusec process 212 MB of resident memory and about 90 ms at start (its
// initialisers run at load), and NVRTC 34 MB: `fusec --version`, `opt` and `compile --emit`
// paid that for libraries they never call. fusec instead defines the entry points it calls
// (runtime/cublaslt_entry_points.cpp, codegen/nvrtc_entry_points.cpp: the headers' own
// signatures), and each forwards to the real function, which the first call looks up here.
#pragma once
#include <string>

namespace fusec {

class LazyLibrary {
 public:
  // `soname` is tried first (the loader's search path, as linking would), then `fallback`
  // (the path CMake found at configure time).
  LazyLibrary(const char* soname, const char* fallback) : soname_(soname), fallback_(fallback) {}
  // The address of `symbol`. Throws Error naming the library or the symbol when either
  // cannot be found: one line, never a crash.
  void* symbol(const char* name);

 private:
  void* open();
  const char* soname_;
  const char* fallback_;
  void* handle_ = nullptr;
};

// Calls the real function behind the entry point `Fn` (fusec's own definition of it, which
// gives the type and keys the lookup), looked up once: each forwarding definition is
// `return lazyCall<&name>(library(), "name", args...);`.
template <auto Fn, class... Args>
auto lazyCall(LazyLibrary& lib, const char* name, Args... args) {
  static const auto f = reinterpret_cast<decltype(Fn)>(lib.symbol(name));
  return f(args...);
}

}  // namespace fusec

// An entry-points file's library: defines `library()`, the LazyLibrary of `soname` (else
// `fallback`), opened at the first call that needs it, and brings lazyCall in. Use it inside
// the file's anonymous namespace.
#define FUSEC_LAZY_LIBRARY(soname, fallback)          \
  fusec::LazyLibrary& library() {                     \
    static fusec::LazyLibrary lib((soname), (fallback)); \
    return lib;                                       \
  }                                                   \
  using fusec::lazyCall;
