// Private to bench/*.cpp (it includes torch): HostTensor <-> torch::Tensor, LibTorch errors
// as one-line fusec::Errors, and handing LibTorch's cached CUDA memory back.
#pragma once
#include <torch/torch.h>
#ifdef FUSEC_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "ir/host_tensor.h"

namespace fusec::bench {

// Runs `fn`, turning LibTorch's multi-line c10::Error into a one-line fusec::Error.
template <class Fn>
auto guarded(const char* what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    msg = msg.substr(0, msg.find('\n'));
    throw Error(std::string("libtorch (") + what + "): " + msg);
  }
}

inline std::vector<int64_t> dims(const Shape& s) { return std::vector<int64_t>(s.begin(), s.end()); }

inline torch::Tensor toTorch(const HostTensor& t, const torch::Device& dev) {
  const auto shape = dims(t.type.shape);
  torch::Tensor view;  // aliases the host vector: copied below, onto the device or in place
  if (t.type.dtype == DType::f32)
    view = torch::from_blob(const_cast<float*>(t.f.data()), shape, torch::kFloat32);
  else if (t.type.dtype == DType::i64)
    view = torch::from_blob(const_cast<int64_t*>(t.i.data()), shape, torch::kInt64);
  else
    throw Error("eager model: " + t.type.str() + " tensors are not supported (f32 and i64 only)");
  return dev.is_cpu() ? view.clone() : view.to(dev);
}

inline HostTensor toHost(const torch::Tensor& t) {
  torch::Tensor c = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  Shape shape(c.sizes().begin(), c.sizes().end());
  HostTensor h = HostTensor::zeros(Type{DType::f32, shape});
  if (!h.f.empty()) std::memcpy(h.f.data(), c.data_ptr<float>(), h.f.size() * sizeof(float));
  return h;
}

// Hands the blocks LibTorch's caching allocator keeps back to the driver (a no-op for a
// LibTorch built without CUDA, where nothing was allocated on a device).
inline void releaseCachedCudaMemory() {
#ifdef FUSEC_TORCH_CUDA
  c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

// Empties LibTorch's CUDA cache and restarts its peak statistics, so a benchmark row starts
// clean and measures its own peak. The caching allocator sets up its per-device state on the
// first CUDA allocation and rejects every statistics call before that ("Invalid device
// argument"), hence the one-element allocation first.
inline void resetCudaAllocator() {
#ifdef FUSEC_TORCH_CUDA
  (void)torch::empty({1}, torch::TensorOptions().device(torch::kCUDA));
  c10::cuda::CUDACachingAllocator::emptyCache();
  c10::cuda::CUDACachingAllocator::resetPeakStats(0);
#endif
}

// Peak allocated and reserved bytes since resetCudaAllocator() (nullopt without CUDA LibTorch).
// Index 0 is StatType::AGGREGATE (all pools); the enum moved namespaces across 2.x releases
// (c10::CachingAllocator, c10::CachingDeviceAllocator), the index did not.
struct CudaAllocatorPeaks {
  std::optional<int64_t> allocated, reserved;
};
inline CudaAllocatorPeaks cudaAllocatorPeaks() {
#ifdef FUSEC_TORCH_CUDA
  const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  return {int64_t(s.allocated_bytes[0].peak), int64_t(s.reserved_bytes[0].peak)};
#else
  return {};
#endif
}

}  // namespace fusec::bench
