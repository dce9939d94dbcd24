#include "runtime/device.h"

#include <dlfcn.h>

#include <cstdio>

namespace fusec::rt {

void cudaCheck(cudaError_t status, const char* call, const std::string& what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the next call does not report it again
  throw Error(std::string("CUDA ") + call + " failed in " + what + ": " + cudaGetErrorString(status));
}

namespace {

// The statuses with which cudart says there is nothing to run on, rather than a fault.
bool meansNoDevice(cudaError_t s) {
  return s == cudaErrorNoDevice || s == cudaErrorInsufficientDriver || s == cudaErrorInvalidDevice ||
         s == cudaErrorDevicesUnavailable || s == cudaErrorSystemDriverMismatch ||
         s == cudaErrorCompatNotSupportedOnDevice || s == cudaErrorInitializationError;
}

// Why cudart found nothing, in words that fit the machine: without the driver library at all
// cudart says "CUDA driver version is insufficient for CUDA runtime version", which reads as
// an old driver on a machine that has none.
std::string noDeviceReason(cudaError_t s) {
  if (s == cudaSuccess) return "no CUDA device";
  if (s == cudaErrorInsufficientDriver) {
    void* driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!driver) return "no CUDA device (no NVIDIA driver on this machine: libcuda.so.1 is not installed)";
    ::dlclose(driver);
  }
  return std::string("no CUDA device (") + cudaGetErrorString(s) + ")";
}

}  // namespace

bool deviceAvailable(std::string* why) {
  int n = 0;
  cudaError_t s = cudaGetDeviceCount(&n);
  if (s == cudaSuccess && n > 0) return true;
  cudaGetLastError();
  if (why) *why = noDeviceReason(s);
  return false;
}

int deviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

codegen::Target targetOf(const cudaDeviceProp& prop) {
  codegen::Target t;
  t.major = prop.major;
  t.minor = prop.minor;
  t.sms = prop.multiProcessorCount;
  t.threadsPerSm = prop.maxThreadsPerMultiProcessor;
  t.regsPerSm = prop.regsPerMultiprocessor;
  t.smemPerSm = int64_t(prop.sharedMemPerMultiprocessor);
  t.smemPerBlock = int64_t(prop.sharedMemPerBlockOptin);
  t.smemStaticPerBlock = int64_t(prop.sharedMemPerBlock);
  t.smemReservedPerBlock = int64_t(prop.reservedSharedMemPerBlock);
  t.wgmma = prop.major == 9 && prop.minor == 0 && codegen::wgmmaAllowedByEnv();
  codegen::applyEnvSwitches(t);
  return t;
}

DeviceInfo openDevice() {
  int n = 0;
  cudaError_t s = cudaGetDeviceCount(&n);
  if ((s != cudaSuccess && meansNoDevice(s)) || (s == cudaSuccess && n == 0)) {
    cudaGetLastError();
    throw Error("no CUDA device");
  }
  FUSEC_CUDA(s, "device discovery");
  DeviceInfo d;
  FUSEC_CUDA(cudaSetDevice(d.index), "device discovery");
  cudaDeviceProp prop{};
  FUSEC_CUDA(cudaGetDeviceProperties(&prop, d.index), "device discovery");
  d.name = prop.name;
  d.target = targetOf(prop);
  FUSEC_CUDA(cudaMemGetInfo(&d.freeBytes, &d.totalBytes), "device discovery");
  return d;
}

std::string outOfMemoryMessage(size_t needBytes, size_t freeBytes) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  char buf[128];
  std::snprintf(buf, sizeof buf, "out of GPU memory: needs %.2f GiB, %.2f GiB free", double(needBytes) / kGiB,
                double(freeBytes) / kGiB);
  return buf;
}

DeviceBuffer::DeviceBuffer(size_t bytes, const std::string& what) : bytes_(bytes) {
  if (bytes == 0) return;
  cudaError_t s = cudaMalloc(&ptr_, bytes);
  if (s == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t freeB = 0, total = 0;
    cudaMemGetInfo(&freeB, &total);
    ptr_ = nullptr;
    throw Error(outOfMemoryMessage(bytes, freeB));
  }
  FUSEC_CUDA(s, "allocating the " + what);
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);  // errors here would be from an earlier fault, already reported
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

}  // namespace fusec::rt
