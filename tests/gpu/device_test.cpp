// Device basics: "no CUDA device" where there is none (this runs in CI), and the
// out-of-memory message where there is one.
#include <gtest/gtest.h>

#include "runtime/device.h"
#include "test_util.h"

namespace fusec {
namespace {

TEST(Device, NoDeviceIsOneLineError) {
  if (rt::deviceAvailable()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(test::errorOf([] { rt::openDevice(); }), "no CUDA device");
}

TEST(Device, OpensAndReportsOutOfMemory) {
  std::string why;
  if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  rt::DeviceInfo d = rt::openDevice();
  std::printf("device: %s (sm_%d%d), %.1f GiB free\n", d.name.c_str(), d.major, d.minor, double(d.freeBytes) / (1 << 30));
  std::string err = test::errorOf([] { rt::DeviceBuffer huge(size_t(1) << 50); });
  EXPECT_EQ(err.rfind("out of GPU memory: needs 1048576.00 GiB, ", 0), 0u) << err;
  EXPECT_NE(err.find(" GiB free"), std::string::npos) << err;
  rt::DeviceBuffer ok(size_t(1) << 20);  // the failed allocation left no sticky error
  EXPECT_NE(ok.data(), nullptr);
}

}  // namespace
}  // namespace fusec
