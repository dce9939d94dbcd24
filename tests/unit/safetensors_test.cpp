// Tests of frontend/safetensors: exact round trips for every dtype (random non-zero data and
// the special values of each float format), byte-level agreement with the format as
// PyTorch's safetensors writes it, atomic writes, and one test per kind of malformed file,
// each written to a temp dir and expected to fail with a one-line Error naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "frontend/safetensors.h"

using namespace fusec;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("fusec_safetensors_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

void writeBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A safetensors file from its parts: the header length is computed unless given.
std::string stFile(const std::string& header, const std::string& data, int64_t headerLen = -1) {
  uint64_t n = headerLen < 0 ? header.size() : uint64_t(headerLen);
  std::string s(8, '\0');
  std::memcpy(s.data(), &n, 8);
  return s + header + data;
}

// Random non-zero values, exactly representable in the dtype.
HostTensor randomTensor(DType d, Shape shape, std::mt19937& rng) {
  HostTensor t = HostTensor::zeros(Type{d, shape});
  std::uniform_real_distribution<float> mag(0.5f, 2.0f);
  std::uniform_int_distribution<int64_t> i64(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  std::uniform_int_distribution<int64_t> i32(std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
  for (size_t k = 0; k < t.size(); ++k) {
    float sign = (rng() & 1) ? -1.0f : 1.0f;
    switch (d) {
      case DType::f32: case DType::bf16: case DType::f16:
        t.f[k] = roundToDType(sign * mag(rng) * std::ldexp(1.0f, int(rng() % 9) - 4), d);
        break;
      case DType::i64: do t.i[k] = i64(rng); while (t.i[k] == 0); break;
      case DType::i32: do t.i[k] = i32(rng); while (t.i[k] == 0); break;
      case DType::boolean: t.i[k] = int64_t(rng() & 1); break;
    }
  }
  return t;
}

// Bitwise equality (NaN payloads and signed zeros included).
void expectSame(const HostTensor& a, const HostTensor& b, const std::string& name) {
  ASSERT_EQ(a.type, b.type) << name;
  if (isFloat(a.type.dtype)) {
    ASSERT_EQ(a.f.size(), b.f.size()) << name;
    for (size_t k = 0; k < a.f.size(); ++k)
      ASSERT_EQ(std::bit_cast<uint32_t>(a.f[k]), std::bit_cast<uint32_t>(b.f[k])) << name << "[" << k << "] " << a.f[k]
                                                                                  << " vs " << b.f[k];
  } else {
    ASSERT_EQ(a.i, b.i) << name;
  }
}

const DType kAll[] = {DType::f32, DType::bf16, DType::f16, DType::i64, DType::i32, DType::boolean};

TEST(Safetensors, RoundTripEveryDType) {
  TempDir dir;
  std::mt19937 rng(1234);
  Bindings in;
  for (DType d : kAll) {
    in["t." + std::string(dtypeName(d))] = randomTensor(d, {3, 5, 7}, rng);
    in["scalar." + std::string(dtypeName(d))] = randomTensor(d, {}, rng);
    in["empty." + std::string(dtypeName(d))] = randomTensor(d, {2, 0, 3}, rng);
  }
  SafetensorsMetadata meta = {{"format", "pt"}, {"model", "tiny"}};
  std::string path = dir.file("rt.safetensors");
  saveSafetensors(path, in, meta);
  SafetensorsMetadata metaBack;
  Bindings out = loadSafetensors(path, &metaBack);
  EXPECT_EQ(metaBack, meta);
  ASSERT_EQ(out.size(), in.size());
  for (auto& [name, t] : in) {
    ASSERT_TRUE(out.count(name)) << name;
    expectSame(out.at(name), t, name);
  }
  // The in-memory variants agree with the file ones.
  EXPECT_EQ(serializeSafetensors(in, meta), readBytes(path));
  Bindings mem = parseSafetensors(readBytes(path), "mem");
  for (auto& [name, t] : in) expectSame(mem.at(name), t, name);
  // Header padded so the data starts 8-byte aligned.
  uint64_t n;
  std::memcpy(&n, readBytes(path).data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  // Nothing but the file itself is left in the directory (the temp file was renamed).
  int files = 0;
  for (auto& e : fs::directory_iterator(dir.path)) { (void)e; ++files; }
  EXPECT_EQ(files, 1);
}

TEST(Safetensors, SpecialFloatValuesRoundTrip) {
  std::vector<float> vals = {0.0f, -0.0f, 1.0f, -2.5f, std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                             65504.0f, std::ldexp(1.0f, -14), std::ldexp(1.0f, -24), std::ldexp(3.0f, -24),
                             std::ldexp(1.0f, -126), std::ldexp(1.0f, -149), 3.0e38f};
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    Bindings in;
    HostTensor t = HostTensor::zeros(Type{d, {int64_t(vals.size())}});
    for (size_t k = 0; k < vals.size(); ++k) t.f[k] = roundToDType(vals[k], d);
    in["x"] = t;
    Bindings out = parseSafetensors(serializeSafetensors(in), "mem");
    expectSame(out.at("x"), t, std::string(dtypeName(d)));
  }
}

// The bytes PyTorch's safetensors would write for known values.
TEST(Safetensors, KnownEncodings) {
  Bindings in;
  HostTensor h = HostTensor::zeros(Type{DType::f16, {4}});
  h.f = {1.0f, -2.0f, 65504.0f, std::ldexp(1.0f, -24)};
  HostTensor b = HostTensor::zeros(Type{DType::bf16, {2}});
  b.f = {1.0f, -3.0f};
  HostTensor i = HostTensor::zeros(Type{DType::i32, {1}});
  i.i = {-2};
  HostTensor z = HostTensor::zeros(Type{DType::boolean, {2}});
  z.i = {1, 0};
  in["a"] = h;
  in["b"] = b;
  in["c"] = i;
  in["d"] = z;
  std::string bytes = serializeSafetensors(in);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  std::string header = bytes.substr(8, n);
  EXPECT_NE(header.find(R"("a":{"data_offsets":[0,8],"dtype":"F16","shape":[4]})"), std::string::npos) << header;
  EXPECT_NE(header.find(R"("d":{"data_offsets":[16,18],"dtype":"BOOL","shape":[2]})"), std::string::npos) << header;
  const unsigned char want[] = {0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b, 0x01, 0x00,  // f16
                                0x80, 0x3f, 0x40, 0xc0,                          // bf16
                                0xfe, 0xff, 0xff, 0xff,                          // i32 -2
                                0x01, 0x00};                                     // bool
  ASSERT_EQ(bytes.size(), 8 + n + sizeof want);
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n, want, sizeof want), 0);
}

// A header as other writers produce it: different key order, whitespace, metadata first,
// tensors stored out of name order.
TEST(Safetensors, ReadsForeignHeaderLayout) {
  std::string header =
      R"({"__metadata__": {"format": "pt"}, "w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},)"
      R"( "ids": {"shape": [1, 2], "dtype": "I64", "data_offsets": [16, 32]}, "a": {"dtype":"F32","shape":[2],"data_offsets":[0,8]}}   )";
  float w[2] = {1.5f, -0.25f}, a[2] = {3.0f, 4.0f};
  int64_t ids[2] = {7, 9999};
  std::string data(32, '\0');
  std::memcpy(data.data(), a, 8);
  std::memcpy(data.data() + 8, w, 8);
  std::memcpy(data.data() + 16, ids, 16);
  Bindings b = parseSafetensors(stFile(header, data), "foreign");
  EXPECT_EQ(b.at("w").f, (std::vector<float>{1.5f, -0.25f}));
  EXPECT_EQ(b.at("a").f, (std::vector<float>{3.0f, 4.0f}));
  EXPECT_EQ(b.at("ids").i, (std::vector<int64_t>{7, 9999}));
  EXPECT_EQ(b.at("ids").type.str(), "i64[1,2]");
}

// Saving over an existing file either replaces it completely or leaves it untouched.
TEST(Safetensors, FailedWriteLeavesOldFile) {
  TempDir dir;
  std::string path = dir.file("w.safetensors");
  Bindings good;
  good["x"] = HostTensor::zeros(Type{DType::f32, {2}});
  good["x"].f = {1.0f, 2.0f};
  saveSafetensors(path, good);
  std::string before = readBytes(path);
  Bindings bad = good;
  bad["y"] = HostTensor::zeros(Type{DType::i32, {1}});
  bad["y"].i = {int64_t(1) << 40};
  try {
    saveSafetensors(path, bad);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit in 32 bits"), std::string::npos) << e.what();
  }
  EXPECT_EQ(readBytes(path), before);
  int files = 0;
  for (auto& e : fs::directory_iterator(dir.path)) { (void)e; ++files; }
  EXPECT_EQ(files, 1);
  EXPECT_THROW(saveSafetensors(dir.file("no/such/dir/w.safetensors"), good), Error);
  EXPECT_THROW(loadSafetensors(dir.file("missing.safetensors")), Error);
}

struct Malformed {
  const char* kind;
  std::string bytes;
  const char* expect;  // substring of the message
};

std::string f32Entry(const std::string& name, const std::string& shape, uint64_t b, uint64_t e) {
  return "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":[" + std::to_string(b) + "," +
         std::to_string(e) + "]}";
}

TEST(SafetensorsMalformed, EachKindIsAOneLineErrorNamingTheFile) {
  std::string d8(8, '\x01'), d16(16, '\x01');
  std::vector<Malformed> cases = {
      {"empty", "", "truncated file: 0 bytes"},
      {"short", std::string(5, '\0'), "truncated file: 5 bytes"},
      {"header_past_end", stFile("{}", "", 50), "truncated file: the header claims 50 bytes but only 2 follow"},
      {"header_absurd", stFile("{}", "", int64_t(200) << 20), "is absurd (more than 100 MB)"},
      {"header_huge", stFile("{}", "", std::numeric_limits<int64_t>::max()), "is absurd"},
      {"bad_json", stFile("{\"x\": {\"dtype\": ", ""), "bad JSON header"},
      {"bad_json_garbage", stFile("\xff\xfe garbage\n more", ""), "bad JSON header"},
      {"not_object", stFile("[1,2]", ""), "bad JSON header: not an object"},
      {"deep", stFile(std::string(100, '[') + std::string(100, ']'), ""), "nested more than"},
      {"unknown_dtype", stFile(R"({"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", d8),
       "tensor 'x': unsupported dtype 'F64'"},
      {"dtype_not_string", stFile(R"({"x":{"dtype":3,"shape":[1],"data_offsets":[0,4]}})", d8), "dtype is not a string"},
      {"missing_field", stFile(R"({"x":{"dtype":"F32","shape":[2]}})", d8), "needs dtype, shape and data_offsets"},
      {"extra_field", stFile(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"y":1}})", d8),
       "unknown field 'y'"},
      {"offsets_out_of_range", stFile("{" + f32Entry("x", "[4]", 0, 16) + "}", d8), "run past the end of the 8-byte"},
      {"offsets_overlap",
       stFile("{" + f32Entry("a", "[2]", 0, 8) + "," + f32Entry("b", "[2]", 4, 12) + "}", d16 ),
       "tensor 'b': data_offsets [4,12] overlap tensor 'a' [0,8]"},
      {"offsets_hole", stFile("{" + f32Entry("a", "[2]", 8, 16) + "}", d16), "leave a hole at bytes [0,8]"},
      {"trailing_bytes", stFile("{" + f32Entry("a", "[2]", 0, 8) + "}", d16), "8 trailing bytes"},
      {"offsets_vs_shape", stFile("{" + f32Entry("a", "[3]", 0, 8) + "}", d8), "hold 8 bytes but F32[3] needs 12"},
      {"offsets_reversed", stFile("{" + f32Entry("a", "[0]", 8, 0) + "}", d8), "end before they begin"},
      {"offsets_not_pair", stFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", d8),
       "data_offsets must be two non-negative integers"},
      {"shape_overflow", stFile("{" + f32Entry("a", "[4294967296,4294967296]", 0, 8) + "}", d8), "overflows"},
      {"shape_bytes_overflow", stFile("{" + f32Entry("a", "[4611686018427387904]", 0, 8) + "}", d8), "overflows"},
      {"shape_negative", stFile("{" + f32Entry("a", "[-2]", 0, 8) + "}", d8), "non-negative integers"},
      {"shape_float", stFile("{" + f32Entry("a", "[2.0]", 0, 8) + "}", d8), "non-negative integers"},
      {"duplicate_name", stFile("{" + f32Entry("a", "[2]", 0, 8) + "," + f32Entry("a", "[2]", 8, 16) + "}", d16),
       "duplicate name 'a'"},
      {"duplicate_field", stFile(R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d8),
       "duplicate name 'dtype'"},
      {"bool_byte", stFile(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", std::string("\x01\x02", 2)),
       "BOOL element 1 is byte 2"},
      {"metadata_not_string", stFile(R"({"__metadata__":{"k":1}})", ""), "__metadata__ value of 'k' is not a string"},
      {"empty_name", stFile("{" + f32Entry("", "[2]", 0, 8) + "}", d8), "empty name"},
  };
  TempDir dir;
  for (auto& c : cases) {
    std::string path = dir.file(std::string(c.kind) + ".safetensors");
    writeBytes(path, c.bytes);
    try {
      loadSafetensors(path);
      ADD_FAILURE() << c.kind << ": expected an Error";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << c.kind << ": " << msg;
      EXPECT_NE(msg.find(c.expect), std::string::npos) << c.kind << ": " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << c.kind << ": " << msg;
    }
    // The in-memory parser gives the same message.
    try {
      parseSafetensors(c.bytes, path);
      ADD_FAILURE() << c.kind << ": expected an Error (memory)";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << c.kind << ": " << e.what();
    }
  }
}

// Every prefix of a valid file is rejected (never a crash or a partial read).
TEST(SafetensorsMalformed, EveryTruncationIsAnError) {
  std::mt19937 rng(7);
  Bindings in;
  in["a"] = randomTensor(DType::f32, {3}, rng);
  in["b"] = randomTensor(DType::i64, {2}, rng);
  std::string bytes = serializeSafetensors(in);
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_THROW(parseSafetensors(std::string_view(bytes).substr(0, n), "cut"), Error) << n;
  EXPECT_NO_THROW(parseSafetensors(bytes, "whole"));
}

// Random byte corruption of a valid file: every outcome is a clean load or an Error (the
// sanitizer build checks that nothing reads out of bounds on the way).
TEST(SafetensorsMalformed, RandomCorruptionIsLoadedOrRejected) {
  std::mt19937 rng(99);
  Bindings in;
  for (DType d : kAll) in[std::string(dtypeName(d))] = randomTensor(d, {2, 3}, rng);
  const std::string good = serializeSafetensors(in);
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes = good;
    int flips = 1 + int(rng() % 3);
    for (int f = 0; f < flips; ++f) {
      // Mostly the length and the header, where the structure lives.
      size_t at = (rng() % 4 != 0) ? rng() % std::min<size_t>(bytes.size(), 300) : rng() % bytes.size();
      bytes[at] = char(rng() % 4 == 0 ? "{}[],:\"0123456789"[rng() % 17] : rng());
    }
    try {
      parseSafetensors(bytes, "fuzz");
    } catch (const Error& e) {
      ++rejected;
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(rejected, 1000);
}

}  // namespace
