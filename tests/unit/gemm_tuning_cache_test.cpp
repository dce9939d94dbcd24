// The GEMM tuning cache (runtime/gemm_tuning_cache.h) on the CPU: keys, the JSON round trip,
// corrupt and foreign files (ignored with a warning, never a crash), merging with entries
// another process saved, atomic writes under concurrent savers, and an unwritable directory.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <optional>
#include <thread>
#include <unistd.h>

#include "runtime/gemm_tuning_cache.h"

namespace fusec {
namespace {

struct TempDir {
  std::string path;
  explicit TempDir(const std::string& name) {
    path = (std::filesystem::temp_directory_path() / ("fusec_tuning_test_" + name + "_" + std::to_string(::getpid())))
               .string();
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

const char* kDevice = "NVIDIA H100 80GB HBM3";
constexpr int kSm = 90;
constexpr uint64_t kLib = 130100;

rt::GemmTuning tuning(uint64_t seed) {
  rt::GemmTuning t;
  for (size_t i = 0; i < t.algo.size(); ++i) t.algo[i] = seed * 0x9e3779b97f4a7c15ull + i;  // all 64 bits used
  t.algoDesc = "algo " + std::to_string(seed) + " tile 20";
  t.candidates = int(seed % 16) + 1;
  t.heuristicMs = 0.125 + double(seed);
  t.tunedMs = 0.0625 + double(seed);
  t.source = rt::GemmTuning::Source::Tuned;
  return t;
}

rt::GemmPlan plan() {
  rt::GemmPlan p;
  p.M = 1024, p.N = 2304, p.K = 768;
  p.dtype = DType::bf16;
  p.a.ld = 768, p.b.ld = 768, p.b.colMajor = true, p.c.ld = 2304;
  p.launches = {{0, 0, 0}};
  return p;
}

std::string readAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

size_t filesIn(const std::string& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

TEST(GemmTuningKey, SeparatesEverythingThatDecidesTheAlgorithm) {
  const rt::GemmPlan p = plan();
  const std::string k = rt::gemmTuningKey(p, false, 16, 16, 16);
  EXPECT_EQ(k, rt::gemmTuningKey(p, false, 16, 16, 16));
  EXPECT_EQ(k, rt::gemmTuningKey(p, true, 16, 16, 16)) << "tf32 only changes f32 GEMMs";
  EXPECT_NE(k, rt::gemmTuningKey(p, false, 16, 16, 8)) << "alignment";
  EXPECT_NE(k, rt::gemmTuningKey(p, false, 16, 16, 16, 120)) << "an SM count target plans another algorithm";
  auto changed = [&](auto edit) {
    rt::GemmPlan q = plan();
    edit(q);
    return rt::gemmTuningKey(q, false, 16, 16, 16);
  };
  EXPECT_NE(k, changed([](rt::GemmPlan& q) { q.M = 2048; }));
  EXPECT_NE(k, changed([](rt::GemmPlan& q) { q.b.colMajor = false; }));
  EXPECT_NE(k, changed([](rt::GemmPlan& q) { q.batch = 12, q.a.batchStride = 768; }));
  EXPECT_NE(k, changed([](rt::GemmPlan& q) { q.c.ld = 4096; }));
  rt::GemmPlan f = plan();
  f.dtype = DType::f32;
  EXPECT_NE(k, rt::gemmTuningKey(f, false, 16, 16, 16));
  EXPECT_NE(rt::gemmTuningKey(f, false, 16, 16, 16), rt::gemmTuningKey(f, true, 16, 16, 16)) << "strict f32 vs tf32";
}

TEST(GemmTuningCache, FileNameCarriesDeviceAndLibrary) {
  EXPECT_EQ(rt::GemmTuningCache::fileName(kDevice, kSm, kLib), "gemm-tuning-NVIDIA_H100_80GB_HBM3-sm90-cublasLt130100.json");
}

TEST(GemmTuningCache, RoundTrip) {
  TempDir dir("roundtrip");
  const std::string key = rt::gemmTuningKey(plan(), false, 16, 16, 16);
  rt::GemmTuning untimed = tuning(7);
  untimed.heuristicMs = untimed.tunedMs = NAN;  // JSON null, back as NaN
  {
    rt::GemmTuningCache c(dir.path, kDevice, kSm, kLib);
    EXPECT_EQ(c.size(), 0u);
    EXPECT_FALSE(c.dirty());
    c.put(key, tuning(3));
    c.put("other", untimed);
    EXPECT_TRUE(c.dirty());
    c.save();
    EXPECT_FALSE(c.dirty());
  }
  EXPECT_EQ(filesIn(dir.path), 1u) << "no temporary file is left behind";
  rt::GemmTuningCache c(dir.path, kDevice, kSm, kLib);
  ASSERT_EQ(c.size(), 2u);
  const std::optional<rt::GemmTuning> t = c.find(key);
  ASSERT_TRUE(t);
  const rt::GemmTuning want = tuning(3);
  EXPECT_EQ(t->algo, want.algo);
  EXPECT_EQ(t->algoDesc, want.algoDesc);
  EXPECT_EQ(t->candidates, want.candidates);
  EXPECT_DOUBLE_EQ(t->heuristicMs, want.heuristicMs);
  EXPECT_DOUBLE_EQ(t->tunedMs, want.tunedMs);
  EXPECT_EQ(t->source, rt::GemmTuning::Source::Cached) << "loaded entries say where they came from";
  EXPECT_TRUE(std::isnan(c.find("other")->heuristicMs));
  EXPECT_FALSE(c.find("missing"));
}

// One object per (dir, device, sm, library) in a process: Executables share their choices.
TEST(GemmTuningCache, SharedIsOnePerFile) {
  TempDir dir("shared");
  rt::GemmTuningCache& a = rt::GemmTuningCache::shared(dir.path, kDevice, kSm, kLib);
  EXPECT_EQ(&a, &rt::GemmTuningCache::shared(dir.path, kDevice, kSm, kLib));
  EXPECT_NE(&a, &rt::GemmTuningCache::shared(dir.path, kDevice, kSm, kLib + 1));
  EXPECT_NE(&a, &rt::GemmTuningCache::shared("", kDevice, kSm, kLib));
  a.put("k", tuning(4));
  EXPECT_TRUE(rt::GemmTuningCache::shared(dir.path, kDevice, kSm, kLib).find("k"));
}

TEST(GemmTuningCache, MemoryOnlyWritesNothing) {
  rt::GemmTuningCache c("", kDevice, kSm, kLib);
  c.put("k", tuning(1));
  c.save();
  EXPECT_EQ(c.path(), "");
  EXPECT_TRUE(c.find("k"));
}

// Each damaged file: ignored with one warning naming it, the cache starts empty, and the next
// save replaces it with a good file.
TEST(GemmTuningCache, CorruptFileIsIgnoredWithAWarning) {
  TempDir dir("corrupt");
  std::filesystem::create_directories(dir.path);
  const std::string path = dir.path + "/" + rt::GemmTuningCache::fileName(kDevice, kSm, kLib);
  std::string good;
  {
    rt::GemmTuningCache c(dir.path, kDevice, kSm, kLib);
    c.put("k", tuning(2));
    c.save();
    good = readAll(path);
  }
  const std::vector<std::string> damaged = {
      good.substr(0, good.size() / 2),                                                  // truncated
      "\x01\x02garbage",                                                                // not JSON
      "[]",                                                                             // JSON, wrong shape
      std::string(good).replace(good.find("fusec-gemm-tuning-2"), 19, "fusec-gemm-tuning-1"),  // old format
      std::string(good).replace(good.find("\"candidates\""), 12, "\"candidatez\""),   // missing field
  };
  for (size_t i = 0; i < damaged.size(); ++i) {
    { std::ofstream(path, std::ios::binary | std::ios::trunc) << damaged[i]; }
    testing::internal::CaptureStderr();
    rt::GemmTuningCache c(dir.path, kDevice, kSm, kLib);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(c.size(), 0u) << "case " << i;
    EXPECT_NE(err.find("warning: ignoring the GEMM tuning cache " + path), std::string::npos) << "case " << i << ": " << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "one line: " << err;
    c.put("k", tuning(5));
    c.save();
    rt::GemmTuningCache again(dir.path, kDevice, kSm, kLib);
    ASSERT_TRUE(again.find("k")) << "case " << i;
    EXPECT_EQ(again.find("k")->algo, tuning(5).algo);
  }
  // A malformed algorithm word is corrupt too.
  std::string badWord = good;
  const size_t at = badWord.find("\"algo\"");
  badWord.replace(badWord.find('"', at + 8) + 1, 1, "z");
  { std::ofstream(path, std::ios::binary | std::ios::trunc) << badWord; }
  testing::internal::CaptureStderr();
  rt::GemmTuningCache c(dir.path, kDevice, kSm, kLib);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("not hex"), std::string::npos);
  EXPECT_EQ(c.size(), 0u);
}

// A file renamed or copied from another GPU or cuBLASLt: its header does not match, so its
// algorithms are not used.
TEST(GemmTuningCache, ForeignDeviceOrLibraryIsIgnored) {
  TempDir dir("foreign");
  {
    rt::GemmTuningCache c(dir.path, "NVIDIA H200", kSm, kLib);
    c.put("k", tuning(2));
    c.save();
  }
  const std::string h200 = dir.path + "/" + rt::GemmTuningCache::fileName("NVIDIA H200", kSm, kLib);
  const std::string mine = dir.path + "/" + rt::GemmTuningCache::fileName(kDevice, kSm, kLib);
  std::filesystem::copy_file(h200, mine);
  testing::internal::CaptureStderr();
  rt::GemmTuningCache c(dir.path, kDevice, kSm, kLib);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(c.size(), 0u);
  EXPECT_NE(err.find("written for NVIDIA H200"), std::string::npos) << err;
  {
    rt::GemmTuningCache v(dir.path, "NVIDIA H200", kSm, kLib + 1);  // another library version: another file
    EXPECT_EQ(v.size(), 0u);
    EXPECT_NE(v.path(), h200);
  }
  rt::GemmTuningCache same(dir.path, "NVIDIA H200", kSm, kLib);
  EXPECT_TRUE(same.find("k"));
  EXPECT_FALSE(same.find(rt::gemmTuningKey(plan(), false, 16, 16, 16))) << "another shape is a miss";
}

// A process that loaded the file before another one saved keeps the other's entries.
TEST(GemmTuningCache, SaveMergesWhatOthersSaved) {
  TempDir dir("merge");
  rt::GemmTuningCache first(dir.path, kDevice, kSm, kLib), second(dir.path, kDevice, kSm, kLib);
  first.put("a", tuning(1));
  first.save();
  second.put("b", tuning(2));
  second.save();
  rt::GemmTuningCache c(dir.path, kDevice, kSm, kLib);
  EXPECT_EQ(c.size(), 2u);
  EXPECT_TRUE(c.find("a"));
  EXPECT_TRUE(c.find("b"));
}

// Many writers at once: every read sees a whole file (a reader in the loop too), and no
// temporary file is left.
TEST(GemmTuningCache, ConcurrentSavesStayReadable) {
  TempDir dir("concurrent");
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w)
    threads.emplace_back([&, w] {
      for (int i = 0; i < 25; ++i) {
        rt::GemmTuningCache c(dir.path, kDevice, kSm, kLib);
        c.put("w" + std::to_string(w) + "_" + std::to_string(i), tuning(uint64_t(w * 100 + i)));
        c.save();
      }
    });
  std::atomic<int> badReads{0};
  std::thread reader([&] {
    for (int i = 0; i < 50; ++i) {
      testing::internal::CaptureStderr();  // not thread-safe with other captures; none run here
      rt::GemmTuningCache c(dir.path, kDevice, kSm, kLib);
      if (!testing::internal::GetCapturedStderr().empty()) ++badReads;
    }
  });
  for (auto& t : threads) t.join();
  reader.join();
  EXPECT_EQ(badReads.load(), 0);
  testing::internal::CaptureStderr();
  rt::GemmTuningCache c(dir.path, kDevice, kSm, kLib);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_GE(c.size(), 25u) << "each writer's last save merged at least its own entries";
  EXPECT_EQ(filesIn(dir.path), 1u);
}

TEST(GemmTuningCache, UnwritableDirectoryWarnsOnce) {
  TempDir dir("unwritable");
  std::filesystem::create_directories(dir.path);
  const std::string blocker = dir.path + "/file";
  { std::ofstream(blocker) << "x"; }
  rt::GemmTuningCache c(blocker, kDevice, kSm, kLib);  // a directory under a regular file
  c.put("k", tuning(1));
  testing::internal::CaptureStderr();
  c.save();
  c.save();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cannot write the GEMM tuning cache"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_TRUE(c.find("k")) << "the choice stays in memory";
}

}  // namespace
}  // namespace fusec
