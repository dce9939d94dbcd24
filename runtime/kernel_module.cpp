#include "runtime/kernel_module.h"

#include "codegen/nvrtc_compiler.h"
#include "runtime/device.h"

namespace fusec::rt {

namespace {

// Above 48 KiB, dynamic shared memory is opt-in per function.
constexpr uint32_t kDefaultSmemLimit = 48 * 1024;

}  // namespace

KernelModule::KernelModule(const std::vector<codegen::GeneratedKernel>& kernels,
                           const std::map<std::string, codegen::Bytes>& cubins) {
  try {
    int device = 0;
    FUSEC_CUDA(cudaGetDevice(&device), "loading kernels");
    for (const auto& k : kernels) {
      auto lib = libraries_.find(k.image);
      if (lib == libraries_.end()) {
        auto bin = cubins.find(k.image);
        if (bin == cubins.end()) throw Error("no cubin for kernel image '" + k.image + "'");
        cudaLibrary_t l = nullptr;
        FUSEC_CUDA(cudaLibraryLoadData(&l, bin->second.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
                   "loading the cubin of " + k.image);
        lib = libraries_.emplace(k.image, l).first;
      }
      LoadedKernel& loaded = kernels_[k.name];
      loaded.arity = k.operands.size() + k.results.size();
      for (const auto& launch : k.launches) {
        cudaKernel_t fn = nullptr;
        FUSEC_CUDA(cudaLibraryGetKernel(&fn, lib->second, launch.function.c_str()), "looking up " + launch.function);
        if (launch.dynamicSmem > kDefaultSmemLimit)
          FUSEC_CUDA(cudaKernelSetAttributeForDevice(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     int(launch.dynamicSmem), device),
                     "raising the shared memory limit of " + launch.function);
        loaded.steps.push_back({fn, launch});
      }
    }
  } catch (...) {
    for (auto& [name, l] : libraries_) cudaLibraryUnload(l);
    throw;
  }
}

KernelModule::~KernelModule() {
  for (auto& [name, l] : libraries_) cudaLibraryUnload(l);  // errors would be an earlier fault's
}

const LoadedKernel& KernelModule::find(const std::string& name) const {
  auto it = kernels_.find(name);
  if (it == kernels_.end()) throw Error("no loaded kernel '" + name + "'");
  return it->second;
}

void launchKernel(const LoadedKernel& k, void** args, cudaStream_t stream, bool asDependent) {
  for (const LoadedKernel::Step& s : k.steps) {
    const auto& l = s.launch;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(l.grid[0], l.grid[1], l.grid[2]);
    config.blockDim = dim3(l.block[0], l.block[1], l.block[2]);
    config.dynamicSmemBytes = l.dynamicSmem;
    config.stream = stream;
    cudaLaunchAttribute dependent{};
    dependent.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    dependent.val.programmaticStreamSerializationAllowed = 1;
    // A kernel's later launches follow its first in the same stream, so they may be dependents
    // as well.
    if (l.dependent && asDependent) {
      config.attrs = &dependent;
      config.numAttrs = 1;
    }
    cudaError_t status = cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(s.fn), args);
    if (status != cudaSuccess) {
      cudaGetLastError();
      throw Error("CUDA launch of " + l.function + " failed: " + cudaGetErrorString(status));
    }
  }
}

void KernelModule::launch(const std::string& name, const std::vector<void*>& pointers, cudaStream_t stream) const {
  const LoadedKernel& k = find(name);
  if (pointers.size() != k.arity)
    throw Error("kernel " + name + " takes " + std::to_string(k.arity) + " pointers, got " +
                std::to_string(pointers.size()));
  // cudaLaunchKernel wants the address of each argument, here each device pointer.
  std::vector<void*> args(pointers.size());
  for (size_t i = 0; i < pointers.size(); ++i) args[i] = const_cast<void**>(&pointers[i]);
  launchKernel(k, args.data(), stream);
}

std::map<std::string, codegen::Bytes> compileImages(const std::vector<codegen::GeneratedKernel>& kernels,
                                                    const codegen::CubinCache* cache, const codegen::Target& target) {
  std::vector<codegen::CompileJob> jobs;
  for (const auto& k : kernels)
    if (k.image == k.name) jobs.push_back({k.name, k.source});
  std::vector<codegen::Bytes> bins = codegen::compileCubins(jobs, cache, 0, codegen::NvrtcOptions{target.arch()});
  std::map<std::string, codegen::Bytes> out;
  for (size_t i = 0; i < jobs.size(); ++i) out.emplace(jobs[i].name, std::move(bins[i]));
  return out;
}

}  // namespace fusec::rt
