// CUDA device basics: error checks that name what failed, device discovery that turns "no
// device or no driver" into one user-facing error, and the device arena allocation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include "codegen/target.h"
#include "ir/graph.h"

namespace fusec::rt {

// Throws Error("CUDA <call> failed in <what>: <message>") unless `status` is cudaSuccess.
void cudaCheck(cudaError_t status, const char* call, const std::string& what);

// Checks a runtime API call, naming the call's text and what it was for.
#define FUSEC_CUDA(call, what) ::fusec::rt::cudaCheck((call), #call, (what))

struct DeviceInfo {
  int index = 0;
  std::string name;         // "NVIDIA H100 80GB HBM3"
  codegen::Target target;   // its architecture, multiprocessors and shared memory
  size_t freeBytes = 0, totalBytes = 0;
};

// The codegen target of a device, from what CUDA says of it.
codegen::Target targetOf(const cudaDeviceProp& prop);

// Device 0 made current. Throws Error("no CUDA device") where there is no device or no
// driver (cudart loads libcuda on this first call; its absence is not a crash).
DeviceInfo openDevice();

// True when openDevice() would succeed (for tests that skip with a reason).
bool deviceAvailable(std::string* why = nullptr);
// The CUDA devices this process can see (0 when there are none or the driver is missing).
int deviceCount();

// One cudaMalloc'ed block, freed on destruction. Throws
// Error("out of GPU memory: needs X GiB, Y GiB free") when the device cannot hold it.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes, const std::string& what = "arena");
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr, o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// "needs 3.50 GiB, 1.25 GiB free" wording, shared with the check done before a whole plan.
std::string outOfMemoryMessage(size_t needBytes, size_t freeBytes);

}  // namespace fusec::rt
