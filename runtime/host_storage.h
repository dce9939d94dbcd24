// Host tensors <-> the bytes a tensor occupies on the device (codegen/kernel_abi.h element
// types: f32 as float, bf16/f16 as their 16-bit patterns, i64/i32 at their width, bool as one
// byte). Used by the runtime to bind and read values and by the GPU tests. No CUDA here.
#pragma once
#include <cstdint>
#include <vector>

#include "ir/host_tensor.h"

namespace fusec::rt {

size_t storageBytes(const Type& t);

// `t`'s values stored as `storage` (t's own dtype, or a 16-bit float dtype for an f32 `t`:
// values are rounded to nearest even).
std::vector<uint8_t> toStorage(const HostTensor& t, DType storage);
inline std::vector<uint8_t> toStorage(const HostTensor& t) { return toStorage(t, t.type.dtype); }

// The tensor of `type` stored in `bytes`. A bool byte is read as is (a poisoned 0xff reads
// as 255, so tests can tell it from 0 and 1).
HostTensor fromStorage(const Type& type, const std::vector<uint8_t>& bytes);

}  // namespace fusec::rt
