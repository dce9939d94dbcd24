// The C interface (api/c_api.h, libfusec_c.so) on the CPU: a function compiled from .fir text
// runs on the caller's host buffers and gives what the interpreter gives, in fusec's storage
// layout (bf16 as 16-bit patterns); every misuse is one line and a failed return, never a crash.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "api/c_api.h"
#include "ir/host_tensor.h"

namespace {

constexpr const char* kFir = R"(func @f {
  %x = input() {name = "x"} : f32[4]
  %y = input() {name = "y"} : f32[4]
  %h = input() {name = "h"} : bf16[4]
  %m = mul(%x, %y) : f32[4]
  %r = add(%m, %x) : f32[4]
  %s = sum(%r) {axes = [0], keepdim = false} : f32[]
  %hc = cast(%h) : f32[4]
  %t = mul(%hc, %x) : f32[4]
  return %r, %s, %t
}
)";

uint16_t bf16Bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return uint16_t(u >> 16);  // the values below are exact in bf16
}

struct Program {
  fusec_program* p = nullptr;
  ~Program() { fusec_destroy(p); }
};

TEST(CApi, CompilesAndRunsOnHostBuffers) {
  char err[256] = "";
  Program prog{fusec_compile(kFir, "cpu", "", err, sizeof err)};
  ASSERT_NE(prog.p, nullptr) << err;
  ASSERT_EQ(fusec_num_sources(prog.p), 3u);
  EXPECT_STREQ(fusec_source_name(prog.p, 0), "x");
  EXPECT_STREQ(fusec_source_type(prog.p, 2), "bf16[4]");
  ASSERT_EQ(fusec_num_outputs(prog.p), 3u);
  EXPECT_STREQ(fusec_output_type(prog.p, 1), "f32[]");
  EXPECT_EQ(fusec_source_name(prog.p, 3), nullptr);

  std::vector<float> x = {1, 2, 3, -4}, y = {0.5f, -1, 2, 3}, r(4), s(1), t(4);
  std::vector<uint16_t> h = {bf16Bits(2), bf16Bits(-0.5f), bf16Bits(8), bf16Bits(0.25f)};
  const void* sources[] = {x.data(), y.data(), h.data()};
  void* outputs[] = {r.data(), s.data(), t.data()};
  ASSERT_EQ(fusec_run(prog.p, sources, outputs, nullptr, err, sizeof err), 0) << err;
  float sum = 0;
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(r[i], x[i] * y[i] + x[i]);
    sum += r[i];
  }
  EXPECT_FLOAT_EQ(s[0], sum);
  EXPECT_FLOAT_EQ(t[0], 2.0f);
  EXPECT_FLOAT_EQ(t[1], -1.0f);
  EXPECT_FLOAT_EQ(t[2], 24.0f);
  EXPECT_FLOAT_EQ(t[3], -1.0f);

  // Another call on other values: nothing is kept from the first.
  x = {0, 1, 0, 1};
  ASSERT_EQ(fusec_run(prog.p, sources, outputs, nullptr, err, sizeof err), 0) << err;
  EXPECT_FLOAT_EQ(r[1], 0.0f);
  EXPECT_FLOAT_EQ(s[0], 0 + 0 + 0 + 4);
  EXPECT_STREQ(fusec_stats(prog.p), "calls=2 copied_in=0 copied_out=0");
}

std::string compileError(const char* text, const char* device, const char* options) {
  char err[256] = "unchanged";
  fusec_program* p = fusec_compile(text, device, options, err, sizeof err);
  fusec_destroy(p);
  return p ? "compiled" : err;
}

TEST(CApi, MisuseIsOneLineAndAFailedReturn) {
  EXPECT_NE(compileError("func @f {\n  %x = frob() : f32[4]\n  return %x\n}\n", "cpu", "").find("frob"), std::string::npos);
  EXPECT_NE(compileError(kFir, "tpu", "").find("unknown device 'tpu'"), std::string::npos);
  EXPECT_NE(compileError(kFir, "cpu", "fast=1").find("unknown option 'fast=1'"), std::string::npos);
  EXPECT_NE(compileError(kFir, "cpu", "passes=no-such-pass").find("no-such-pass"), std::string::npos);
  EXPECT_NE(compileError(nullptr, "cpu", "").find("no .fir text"), std::string::npos);
  EXPECT_NE(compileError("", "cpu", "").find("no function"), std::string::npos);
  for (const std::string& e : {compileError(kFir, "tpu", ""), compileError("junk", "cpu", "")})
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;

  // A message longer than the buffer is cut, and still terminated.
  char tiny[8];
  EXPECT_EQ(fusec_compile(kFir, "tpu", "", tiny, sizeof tiny), nullptr);
  EXPECT_EQ(std::strlen(tiny), 7u);

  char err[256] = "";
  Program prog{fusec_compile(kFir, "cpu", nullptr, err, sizeof err)};
  ASSERT_NE(prog.p, nullptr) << err;
  std::vector<float> x(4), r(4), s(1), t(4);
  const void* withNull[] = {x.data(), nullptr, x.data()};
  void* outputs[] = {r.data(), s.data(), t.data()};
  EXPECT_NE(fusec_run(prog.p, withNull, outputs, nullptr, err, sizeof err), 0);
  EXPECT_NE(std::string(err).find("source 1 ('y') is null"), std::string::npos) << err;
  EXPECT_NE(fusec_run(nullptr, withNull, outputs, nullptr, err, sizeof err), 0);
  EXPECT_NE(fusec_run(prog.p, nullptr, outputs, nullptr, err, sizeof err), 0);
}

// Two results the pipeline finds equal (cse: one computation written twice, as an ATen graph
// returns an activation once for each of its readers) are one value: the later output names the
// earlier as its alias, and may share its address (written once) or have its own (written too).
TEST(CApi, EqualOutputsNameTheirAlias) {
  constexpr const char* kTwice = R"(func @f {
  %x = input() {name = "x"} : f32[4]
  %y = input() {name = "y"} : f32[4]
  %a = mul(%x, %y) : f32[4]
  %e = exp(%x) : f32[4]
  %b = mul(%x, %y) : f32[4]
  return %a, %e, %b, %a
}
)";
  char err[256] = "";
  Program prog{fusec_compile(kTwice, "cpu", "", err, sizeof err)};
  ASSERT_NE(prog.p, nullptr) << err;
  EXPECT_EQ(fusec_output_alias(prog.p, 0), -1);
  EXPECT_EQ(fusec_output_alias(prog.p, 1), -1);
  EXPECT_EQ(fusec_output_alias(prog.p, 2), 0);
  EXPECT_EQ(fusec_output_alias(prog.p, 3), 0);
  EXPECT_EQ(fusec_output_alias(prog.p, 4), -1);  // past the outputs
  std::vector<float> x = {1, 2, -3, 0.5f}, y = {2, -1, 4, 8}, a(4), e(4), b(4, -7.0f);
  const void* sources[] = {x.data(), y.data()};
  void* shared[] = {a.data(), e.data(), a.data(), a.data()};
  ASSERT_EQ(fusec_run(prog.p, sources, shared, nullptr, err, sizeof err), 0) << err;
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(a[i], x[i] * y[i]);
  void* apart[] = {a.data(), e.data(), b.data(), a.data()};
  ASSERT_EQ(fusec_run(prog.p, sources, apart, nullptr, err, sizeof err), 0) << err;
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(b[i], x[i] * y[i]);

  Program distinct{fusec_compile(kFir, "cpu", "", err, sizeof err)};
  ASSERT_NE(distinct.p, nullptr) << err;
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(fusec_output_alias(distinct.p, i), -1);
}

// A kernel op read from text whose recorded family is not its body's is refused when the
// text is compiled (checkKernelRecords), before anything is generated from the record.
TEST(CApi, RefusesAKernelRecordThatIsNotItsBody) {
  const char* text =
      "func @f {\n  %x = input() {name = \"x\"} : f32[4,8]\n"
      "  %k = kernel(%x) {name = \"k\", family = \"row_reduce\", hint = \"softmax\"} : f32[4,8] {\n"
      "    %a = input() {name = \"a\"} : f32[4,8]\n    %n = neg(%a) : f32[4,8]\n    return %n\n  }\n  return %k\n}\n";
  EXPECT_NE(compileError(text, "cpu", "").find("kernel 'k' records family \"row_reduce\" but its body is a pointwise kernel"),
            std::string::npos)
      << compileError(text, "cpu", "");
}

TEST(CApi, RefusesInPlaceUpdates) {
  const char* text = "func @f {\n  %w = param() {name = \"w\"} : f32[4]\n  %n = neg(%w) : f32[4]\n  return %n -> \"w\"\n}\n";
  EXPECT_NE(compileError(text, "cpu", "").find("updates a param in place"), std::string::npos);
}

TEST(CApi, CudaWithoutADeviceSaysSo) {
  const std::string e = compileError(kFir, "cuda", "");
  if (e == "compiled") GTEST_SKIP() << "a CUDA device is present";
  EXPECT_NE(e.find("no CUDA device"), std::string::npos) << e;
}

}  // namespace
