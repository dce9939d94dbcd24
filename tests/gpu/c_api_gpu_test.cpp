// The C interface (api/c_api.h) on the GPU: a function run on the caller's device buffers, in
// place (zero-copy), call after call as the caller's addresses change: the first call, the
// captured CUDA graph, a graph updated for new output addresses, an unaligned buffer that must be
// copied, and a source that is also returned as an output (it must stay bound where the caller
// keeps it: placing the outputs once unbound it, and every kernel read zeros).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "api/c_api.h"
#include "runtime/device.h"

namespace fusec {
namespace {

constexpr int kN = 4096;
constexpr const char* kFir = R"(func @f {
  %x = input() {name = "x"} : f32[4096]
  %y = input() {name = "y"} : f32[4096]
  %m = mul(%x, %y) : f32[4096]
  %r = add(%m, %x) : f32[4096]
  %t = mul(%r, %y) : f32[4096]
  return %r, %x, %t
}
)";

struct DeviceVector {
  float* p = nullptr;
  size_t n;
  explicit DeviceVector(size_t count) : n(count) { EXPECT_EQ(cudaMalloc(&p, n * sizeof(float)), cudaSuccess); }
  ~DeviceVector() { cudaFree(p); }
  void upload(const std::vector<float>& v, size_t at = 0) {
    ASSERT_EQ(cudaMemcpy(p + at, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<float> download(size_t count, size_t at = 0) const {
    std::vector<float> v(count);
    EXPECT_EQ(cudaMemcpy(v.data(), p + at, count * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
};

TEST(CApiGpu, RunsInPlaceAsAddressesChange) {
  std::string why;
  if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  char err[512] = "";
  // copy_after_moves=0: every buffer stays in place however often it moves.
  fusec_program* p = fusec_compile(kFir, "cuda", "copy_after_moves=0", err, sizeof err);
  ASSERT_NE(p, nullptr) << err;
  std::vector<float> x(kN), y(kN);
  for (int i = 0; i < kN; ++i) {
    x[i] = float(i % 97) * 0.25f - 3;
    y[i] = float(i % 13) * 0.5f + 1;
  }
  DeviceVector dx(kN), dy(kN), outs(8 * kN + 1);
  dx.upload(x);
  dy.upload(y);
  // Output slots: three at a time, moved between calls; slot 7 + 1 float is unaligned.
  auto check = [&](size_t r, size_t xo, size_t t, const std::string& what) {
    cudaDeviceSynchronize();
    std::vector<float> gr = outs.download(kN, r), gx = outs.download(kN, xo), gt = outs.download(kN, t);
    for (int i = 0; i < kN; ++i) {
      const float want = x[i] * y[i] + x[i];
      ASSERT_EQ(gr[i], want) << what << ", element " << i;
      ASSERT_EQ(gx[i], x[i]) << what << ", element " << i;
      ASSERT_EQ(gt[i], want * y[i]) << what << ", element " << i;
    }
  };
  const size_t layouts[][3] = {{0, kN, 2 * kN},  // first call: launched directly
                               {0, kN, 2 * kN},  // second: captured and replayed
                               {3 * kN, 4 * kN, 5 * kN},  // new addresses: the graph is updated
                               {7 * kN + 1, kN, 2 * kN},  // unaligned: r is copied out
                               {0, kN, 2 * kN}};  // back in place
  int call = 0;
  for (const auto& l : layouts) {
    const void* sources[] = {dx.p, dy.p};
    void* outputs[] = {outs.p + l[0], outs.p + l[1], outs.p + l[2]};
    ASSERT_EQ(cudaMemset(outs.p, 0xff, outs.n * sizeof(float)), cudaSuccess);  // NaNs: nothing stale passes
    ASSERT_EQ(fusec_run(p, sources, outputs, nullptr, err, sizeof err), 0) << err;
    check(l[0], l[1], l[2], "call " + std::to_string(++call));
  }
  // New input values at the same addresses are read (nothing cached from the first calls).
  for (float& v : x) v = -v;
  dx.upload(x);
  const void* sources[] = {dx.p, dy.p};
  void* outputs[] = {outs.p, outs.p + kN, outs.p + 2 * kN};
  ASSERT_EQ(fusec_run(p, sources, outputs, nullptr, err, sizeof err), 0) << err;
  check(0, kN, 2 * kN, "new input values");
  // Moved addresses at calls 1, 3, 4 and 5, with a graph to follow them at 3, 4 and 5; x is
  // copied out every call (a source) and r once (unaligned).
  const std::string stats = fusec_stats(p);
  EXPECT_NE(stats.find("calls=6 copied_in=0 copied_out=7 relinks=4"), std::string::npos) << stats;
  const auto count = [&](const std::string& key) { return std::stoi(stats.substr(stats.find(key + "=") + key.size() + 1)); };
  EXPECT_EQ(count("graph_updates") + count("graph_rebuilds"), 3) << stats;
  fusec_destroy(p);
}

// A caller that hands new output buffers every call: after copy_after_moves moves they are
// copied out instead, and the launch list (and its graph) stops being relinked.
TEST(CApiGpu, BuffersThatKeepMovingAreCopied) {
  std::string why;
  if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  char err[512] = "";
  fusec_program* p = fusec_compile(kFir, "cuda", "copy_after_moves=1", err, sizeof err);
  ASSERT_NE(p, nullptr) << err;
  std::vector<float> x(kN, 1.5f), y(kN, -2.0f);
  DeviceVector dx(kN), dy(kN), outs(6 * kN);
  dx.upload(x);
  dy.upload(y);
  for (int call = 0; call < 6; ++call) {
    const size_t base = size_t(call % 2) * 3 * kN;  // alternating addresses
    const void* sources[] = {dx.p, dy.p};
    void* outputs[] = {outs.p + base, outs.p + base + kN, outs.p + base + 2 * kN};
    ASSERT_EQ(cudaMemset(outs.p, 0xff, outs.n * sizeof(float)), cudaSuccess);
    ASSERT_EQ(fusec_run(p, sources, outputs, nullptr, err, sizeof err), 0) << err;
    cudaDeviceSynchronize();
    const std::vector<float> r = outs.download(kN, base), t = outs.download(kN, base + 2 * kN);
    ASSERT_EQ(r[kN - 1], 1.5f * -2.0f + 1.5f) << "call " << call;
    ASSERT_EQ(t[0], (1.5f * -2.0f + 1.5f) * -2.0f) << "call " << call;
  }
  // Relinked at the first call (everything new) and the second (r and t taken back): no more.
  const std::string stats = fusec_stats(p);
  EXPECT_NE(stats.find("relinks=2 "), std::string::npos) << stats;
  fusec_destroy(p);
}

// An output that is a reshape of a kernel's result (a saved activation the trace returns in
// its own shape) is written in place like the result itself: its kernel writes the caller's
// buffer, and nothing is copied out.
TEST(CApiGpu, ReshapedOutputsAreWrittenInPlace) {
  std::string why;
  if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  constexpr const char* kReshaped = R"(func @f {
  %x = input() {name = "x"} : f32[4096]
  %y = input() {name = "y"} : f32[4096]
  %m = mul(%x, %y) : f32[4096]
  %r = reshape(%m) : f32[64,64]
  %t = exp(%m) : f32[4096]
  return %r, %t
}
)";
  char err[512] = "";
  fusec_program* p = fusec_compile(kReshaped, "cuda", "", err, sizeof err);
  ASSERT_NE(p, nullptr) << err;
  std::vector<float> x(kN), y(kN);
  for (int i = 0; i < kN; ++i) {
    x[i] = float(i % 31) * 0.125f - 2;
    y[i] = float(i % 7) * 0.25f + 0.5f;
  }
  DeviceVector dx(kN), dy(kN), outs(2 * kN);
  dx.upload(x);
  dy.upload(y);
  for (int call = 0; call < 4; ++call) {
    const void* sources[] = {dx.p, dy.p};
    void* outputs[] = {outs.p, outs.p + kN};
    ASSERT_EQ(cudaMemset(outs.p, 0xff, outs.n * sizeof(float)), cudaSuccess);
    ASSERT_EQ(fusec_run(p, sources, outputs, nullptr, err, sizeof err), 0) << err;
    cudaDeviceSynchronize();
    const std::vector<float> r = outs.download(kN);
    for (int i = 0; i < kN; ++i) ASSERT_EQ(r[i], x[i] * y[i]) << "call " << call << ", element " << i;
  }
  const std::string stats = fusec_stats(p);
  EXPECT_NE(stats.find("copied_out=0 "), std::string::npos) << stats;
  fusec_destroy(p);
}

// Memory the caller's buffers stand in for is allocated only once they cannot: with every
// buffer aligned, the program holds its arena less the outputs' storage (planned on top,
// memory-plan-outputs-last); x one float further on makes it allocate the sources' slots and
// read x's copy; then r one float further on, the outputs' storage, r written there and
// copied out. The values are right throughout.
TEST(CApiGpu, RegionsAreAllocatedOnlyForCopies) {
  std::string why;
  if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  char err[512] = "";
  fusec_program* p = fusec_compile(kFir, "cuda", "", err, sizeof err);
  ASSERT_NE(p, nullptr) << err;
  std::vector<float> x(kN), y(kN);
  for (int i = 0; i < kN; ++i) {
    x[i] = float(i % 19) * 0.5f - 4;
    y[i] = float(i % 5) * 0.25f + 0.5f;
  }
  DeviceVector dx(kN + 1), dy(kN), outs(3 * kN + 1);
  dy.upload(y);
  const auto bytes = [&] {
    const std::string stats = fusec_stats(p);
    return size_t(std::stoull(stats.substr(stats.find("device_bytes=") + 13)));
  };
  struct Call {
    size_t x, r;
  };
  std::vector<size_t> held;
  for (Call c : {Call{0, 0}, Call{0, 0}, Call{1, 0}, Call{1, 0}, Call{1, 2 * kN + 1}, Call{1, 2 * kN + 1}}) {
    dx.upload(x, c.x);
    const void* sources[] = {dx.p + c.x, dy.p};
    void* outputs[] = {outs.p + c.r, outs.p + kN, outs.p + (c.r ? 0 : 2 * kN)};
    ASSERT_EQ(cudaMemset(outs.p, 0xff, outs.n * sizeof(float)), cudaSuccess);
    ASSERT_EQ(fusec_run(p, sources, outputs, nullptr, err, sizeof err), 0) << err;
    cudaDeviceSynchronize();
    const std::vector<float> r = outs.download(kN, c.r), t = outs.download(kN, c.r ? 0 : 2 * kN);
    for (int i = 0; i < kN; ++i) {
      ASSERT_EQ(r[i], x[i] * y[i] + x[i]) << "x at +" << c.x << ", r at " << c.r << ", element " << i;
      ASSERT_EQ(t[i], (x[i] * y[i] + x[i]) * y[i]) << "x at +" << c.x << ", r at " << c.r << ", element " << i;
    }
    held.push_back(bytes());
    for (float& v : x) v = v * 0.5f + 1;  // new values each call: nothing stale passes
  }
  EXPECT_GE(held[2], held[0] + 2 * kN * sizeof(float)) << "the sources' slots were not allocated for the copy";
  EXPECT_GE(held[4], held[2] + kN * sizeof(float)) << "the outputs' storage was not allocated for the copy";
  EXPECT_EQ(held[5], held[4]);
  fusec_destroy(p);
}

// Two outputs that are one value after the pipeline (fusec_output_alias): given one address,
// the value is written there once and nothing is copied out; given two, the second is a copy.
TEST(CApiGpu, EqualOutputsAtOneAddressAreWrittenOnce) {
  std::string why;
  if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  constexpr const char* kTwice = R"(func @f {
  %x = input() {name = "x"} : f32[4096]
  %y = input() {name = "y"} : f32[4096]
  %a = mul(%x, %y) : f32[4096]
  %t = exp(%a) : f32[4096]
  %b = mul(%x, %y) : f32[4096]
  return %a, %t, %b
}
)";
  char err[512] = "";
  fusec_program* p = fusec_compile(kTwice, "cuda", "", err, sizeof err);
  ASSERT_NE(p, nullptr) << err;
  ASSERT_EQ(fusec_output_alias(p, 2), 0);
  std::vector<float> x(kN), y(kN);
  for (int i = 0; i < kN; ++i) {
    x[i] = float(i % 29) * 0.125f - 1.5f;
    y[i] = float(i % 11) * 0.25f - 1;
  }
  DeviceVector dx(kN), dy(kN), outs(3 * kN);
  dx.upload(x);
  dy.upload(y);
  const void* sources[] = {dx.p, dy.p};
  auto call = [&](size_t b, const std::string& what) {
    void* outputs[] = {outs.p, outs.p + kN, outs.p + b};
    ASSERT_EQ(cudaMemset(outs.p, 0xff, outs.n * sizeof(float)), cudaSuccess);
    ASSERT_EQ(fusec_run(p, sources, outputs, nullptr, err, sizeof err), 0) << err;
    cudaDeviceSynchronize();
    const std::vector<float> a = outs.download(kN), bv = outs.download(kN, b);
    for (int i = 0; i < kN; ++i) {
      ASSERT_EQ(a[i], x[i] * y[i]) << what << ", element " << i;
      ASSERT_EQ(bv[i], x[i] * y[i]) << what << ", element " << i;
    }
  };
  for (int k = 0; k < 3; ++k) call(0, "shared, call " + std::to_string(k));
  std::string stats = fusec_stats(p);
  EXPECT_NE(stats.find("copied_out=0 "), std::string::npos) << stats;
  call(2 * kN, "apart");
  stats = fusec_stats(p);
  EXPECT_NE(stats.find("copied_out=1 "), std::string::npos) << stats;
  fusec_destroy(p);
}

}  // namespace
}  // namespace fusec
