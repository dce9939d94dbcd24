// Device basics: "no CUDA device" where there is none (this runs in CI), the out-of-memory
// message where there is one, and the CLI's `fusec device` either way.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>

#include "runtime/device.h"
#include "run_fusec.h"
#include "test_util.h"

namespace fusec {
namespace {

TEST(Device, NoDeviceIsOneLineError) {
  if (rt::deviceAvailable()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(test::errorOf([] { rt::openDevice(); }), "no CUDA device");
}

// The skip reason every GPU test prints: on a machine with no NVIDIA driver at all, cudart's
// "CUDA driver version is insufficient" read as an old driver (issue 44).
TEST(Device, NoDriverIsSaidInWordsThatFit) {
  std::string why;
  if (rt::deviceAvailable(&why)) GTEST_SKIP() << "a CUDA device is present";
  if (void* driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
    ::dlclose(driver);
    GTEST_SKIP() << "this machine has the driver library (" << why << ")";
  }
  EXPECT_EQ(why, "no CUDA device (no NVIDIA driver on this machine: libcuda.so.1 is not installed)");
}

TEST(Device, OpensAndReportsOutOfMemory) {
  std::string why;
  if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  rt::DeviceInfo d = rt::openDevice();
  std::printf("device: %s (sm_%d%d), %.1f GiB free\n", d.name.c_str(), d.target.major, d.target.minor, double(d.freeBytes) / (1 << 30));
  std::string err = test::errorOf([] { rt::DeviceBuffer huge(size_t(1) << 50); });
  EXPECT_EQ(err.rfind("out of GPU memory: needs 1048576.00 GiB, ", 0), 0u) << err;
  EXPECT_NE(err.find(" GiB free"), std::string::npos) << err;
  rt::DeviceBuffer ok(size_t(1) << 20);  // the failed allocation left no sticky error
  EXPECT_NE(ok.data(), nullptr);
}


// `fusec run --device cuda` fails fast, before reading its files, where there is no device.
TEST(Device, RunOnCudaWithoutDevice) {
  if (rt::deviceAvailable()) GTEST_SKIP() << "a CUDA device is present";
  auto [out, rc] = test::runFusec("run --device cuda --program forward --model tiny --inputs /nonexistent --out /dev/null");
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(out, "error: no CUDA device\n");
}

// `fusec device` is the CLI's GPU entry point: where no device or driver exists the binary
// still starts and the command fails with one line and exit code 1.
TEST(Device, CliEntryPoint) {
  auto [out, rc] = test::runFusec("device");
  if (rt::deviceAvailable()) {
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("(sm_"), std::string::npos) << out;
  } else {
    EXPECT_EQ(rc, 1);
    EXPECT_EQ(out, "error: no CUDA device\n");
  }
}

}  // namespace
}  // namespace fusec
