// NVRTC's entry points that fusec calls, each forwarding to the real function of libnvrtc,
// opened at the first call (codegen/lazy_library.h says why). The signatures are nvrtc.h's;
// a function fusec starts calling needs its line here, or the link fails.
#ifdef FUSEC_HAVE_NVRTC
#include <nvrtc.h>

#include "codegen/lazy_library.h"

namespace {
FUSEC_LAZY_LIBRARY(FUSEC_NVRTC_SONAME, FUSEC_NVRTC_PATH)
}  // namespace

extern "C" {

nvrtcResult nvrtcVersion(int* major, int* minor) {
  return lazyCall<&nvrtcVersion>(library(), "nvrtcVersion", major, minor);
}
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char* const* options) {
  return lazyCall<&nvrtcCompileProgram>(library(), "nvrtcCompileProgram", prog, numOptions, options);
}
nvrtcResult nvrtcCreateProgram(nvrtcProgram* prog, const char* src, const char* name, int numHeaders,
                               const char* const* headers, const char* const* includeNames) {
  return lazyCall<&nvrtcCreateProgram>(library(), "nvrtcCreateProgram",
                                       prog, src, name, numHeaders, headers, includeNames);
}
nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog) {
  return lazyCall<&nvrtcDestroyProgram>(library(), "nvrtcDestroyProgram", prog);
}
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char* cubin) {
  return lazyCall<&nvrtcGetCUBIN>(library(), "nvrtcGetCUBIN", prog, cubin);
}
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t* cubinSizeRet) {
  return lazyCall<&nvrtcGetCUBINSize>(library(), "nvrtcGetCUBINSize", prog, cubinSizeRet);
}
const char* nvrtcGetErrorString(nvrtcResult result) {
  return lazyCall<&nvrtcGetErrorString>(library(), "nvrtcGetErrorString", result);
}
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char* log) {
  return lazyCall<&nvrtcGetProgramLog>(library(), "nvrtcGetProgramLog", prog, log);
}
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t* logSizeRet) {
  return lazyCall<&nvrtcGetProgramLogSize>(library(), "nvrtcGetProgramLogSize", prog, logSizeRet);
}

}  // extern "C"
#endif
