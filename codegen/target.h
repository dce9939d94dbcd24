// What codegen may assume about the GPU its kernels run on, beyond sm_90: the runtime fills it
// from the device it opened (runtime/device.h), so grids that should fill the GPU (grid-stride
// element loops, persistent row kernels, the column-sum kernels' fixed grid) are sized by its
// multiprocessors. Sources emitted without a device (`fusec compile --emit`, `fusec codegen`)
// use the default, an H100 or H200 (132 SMs). The count is baked into the source, so the
// cubin cache (keyed by source) never hands one device's kernels to another.
#pragma once

namespace fusec::codegen {

struct Target {
  int sms = 132;  // streaming multiprocessors
};

}  // namespace fusec::codegen
