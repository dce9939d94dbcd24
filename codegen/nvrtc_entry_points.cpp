// NVRTC's entry points that fusec calls, each forwarding to the real function of libnvrtc,
// opened at the first call (codegen/lazy_library.h says why). The signatures are nvrtc.h's;
// a function fusec starts calling needs its line here, or the link fails.
#ifdef FUSEC_HAVE_NVRTC
#include <nvrtc.h>

#include "codegen/lazy_library.h"

namespace {
fusec::LazyLibrary& library() {
  static fusec::LazyLibrary lib(FUSEC_NVRTC_SONAME, FUSEC_NVRTC_PATH);
  return lib;
}
using fusec::lazyFunction;
}  // namespace

extern "C" {

nvrtcResult nvrtcVersion(int* major, int* minor) {
  static const auto f = lazyFunction<decltype(&nvrtcVersion)>(library(), "nvrtcVersion");
  return f(major, minor);
}
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char* const* options) {
  static const auto f = lazyFunction<decltype(&nvrtcCompileProgram)>(library(), "nvrtcCompileProgram");
  return f(prog, numOptions, options);
}
nvrtcResult nvrtcCreateProgram(nvrtcProgram* prog, const char* src, const char* name, int numHeaders,
                               const char* const* headers, const char* const* includeNames) {
  static const auto f = lazyFunction<decltype(&nvrtcCreateProgram)>(library(), "nvrtcCreateProgram");
  return f(prog, src, name, numHeaders, headers, includeNames);
}
nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog) {
  static const auto f = lazyFunction<decltype(&nvrtcDestroyProgram)>(library(), "nvrtcDestroyProgram");
  return f(prog);
}
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char* cubin) {
  static const auto f = lazyFunction<decltype(&nvrtcGetCUBIN)>(library(), "nvrtcGetCUBIN");
  return f(prog, cubin);
}
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t* cubinSizeRet) {
  static const auto f = lazyFunction<decltype(&nvrtcGetCUBINSize)>(library(), "nvrtcGetCUBINSize");
  return f(prog, cubinSizeRet);
}
const char* nvrtcGetErrorString(nvrtcResult result) {
  static const auto f = lazyFunction<decltype(&nvrtcGetErrorString)>(library(), "nvrtcGetErrorString");
  return f(result);
}
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char* log) {
  static const auto f = lazyFunction<decltype(&nvrtcGetProgramLog)>(library(), "nvrtcGetProgramLog");
  return f(prog, log);
}
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t* logSizeRet) {
  static const auto f = lazyFunction<decltype(&nvrtcGetProgramLogSize)>(library(), "nvrtcGetProgramLogSize");
  return f(prog, logSizeRet);
}

}  // extern "C"
#endif
