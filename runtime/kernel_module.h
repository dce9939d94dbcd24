// Generated kernels on the device: each image's cubin loaded once as a CUDA library
// (cudaLibraryLoadData, runtime API only, so libcuda stays unlinked), each launch's function
// looked up by its symbol, and a kernel launched exactly as its ABI entry says
// (codegen/kernel_abi.h): every Launch in order, on one stream, with the same pointer list.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "codegen/cubin_cache.h"
#include "codegen/kernel_abi.h"
#include "codegen/target.h"

namespace fusec::rt {

// A kernel's launches with their function handles resolved: what a launch list holds.
struct LoadedKernel {
  struct Step {
    cudaKernel_t fn;
    codegen::Launch launch;
  };
  size_t arity = 0;  // pointers: operands then results
  std::vector<Step> steps;
};

// Enqueues every launch of `k` on `stream` with `args` (the address of each of its `arity`
// device pointers, as cudaLaunchKernel takes them). With `asDependent`, each launch whose
// function waits for its predecessor (codegen::Launch::dependent) is a programmatic dependent
// of the work before it in the stream; the caller says so only where that work is a kernel
// launched in the same stream, not a wait on another stream's event. Throws
// Error("CUDA launch of <function> failed: <message>").
void launchKernel(const LoadedKernel& k, void** args, cudaStream_t stream, bool asDependent = false);

class KernelModule {
 public:
  // `cubins` maps an image name (GeneratedKernel::image) to its cubin; every kernel's image
  // must be there. Throws Error naming the image or symbol that could not be loaded.
  KernelModule(const std::vector<codegen::GeneratedKernel>& kernels,
               const std::map<std::string, codegen::Bytes>& cubins);
  ~KernelModule();
  KernelModule(const KernelModule&) = delete;
  KernelModule& operator=(const KernelModule&) = delete;

  // Enqueues every launch of kernel `name` on `stream`. `pointers` holds the device
  // addresses of its operands then its results (kernel_abi.h); their count is checked.
  // Throws Error("CUDA launch of <function> failed: <message>").
  void launch(const std::string& name, const std::vector<void*>& pointers, cudaStream_t stream = nullptr) const;

  // The loaded kernel `name` (valid while the module lives). Throws Error when absent.
  const LoadedKernel& find(const std::string& name) const;

  size_t imageCount() const { return libraries_.size(); }

 private:
  std::map<std::string, cudaLibrary_t> libraries_;  // by image
  std::map<std::string, LoadedKernel> kernels_;     // by kernel name
};

// The cubins of every distinct image of `kernels`, compiled through NVRTC and `cache` (may
// be null), for `target`'s architecture, keyed as KernelModule expects.
std::map<std::string, codegen::Bytes> compileImages(const std::vector<codegen::GeneratedKernel>& kernels,
                                                    const codegen::CubinCache* cache, const codegen::Target& target = {});

}  // namespace fusec::rt
