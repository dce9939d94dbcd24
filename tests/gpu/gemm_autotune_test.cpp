// GEMM autotuning through the Executable: the first one tunes every GEMM at its first run
// and saves the choices beside the cubin cache (a fresh reader of the file finds every
// algorithm); a second one with the same cache directory takes them (same algorithms, no
// timing, the file not rewritten); a corrupt file is re-tuned with a warning; autotuning off
// (option or FUSEC_GEMM_AUTOTUNE=0) takes cuBLASLt's heuristic. The tuned and untuned steps
// agree on the loss. A new process loading the file is tested through the CLI
// (profile_test.cpp). Skips without a device.
#include <gtest/gtest.h>

#include <cublasLt.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "bench/bench_case.h"
#include "bench/program.h"
#include "frontend/models/zoo_model.h"
#include "codegen/cubin_cache.h"
#include "frontend/models/transformer.h"
#include "frontend/program_state.h"
#include "runtime/device.h"
#include "runtime/executable.h"

namespace fusec {
namespace {

struct TempDir {
  std::string path;
  explicit TempDir(const std::string& name) {
    path = (std::filesystem::temp_directory_path() / ("fusec_autotune_test_" + name + "_" + std::to_string(::getpid())))
               .string();
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

std::string readAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct StepResult {
  std::vector<rt::LaunchInfo> launches;
  float loss = 0;
};

class GemmAutotune : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
    cfg = models::namedConfig("small");
    cfg.layers = 2;
    g = &bench::buildProgram(m, *models::transformerModel(cfg), bench::BenchPass::Step, DType::bf16, 2, 64, models::AdamWConfig{});
    env = bench::benchInputs(*models::transformerModel(cfg), 2, 64, 3);
    bindProgramState(*g, env);
  }

  // One training step on a fresh Executable: its launches (with the GEMM choices) and loss.
  StepResult step(const rt::ExecutableOptions& opts) {
    rt::Executable exe(*g, opts);
    exe.bind(env);
    HostTensor t = HostTensor::zeros(Type{DType::f32, {}});
    t.f[0] = 1;
    exe.bind("step", t);
    exe.run();
    StepResult r;
    r.loss = exe.output(0).f.at(0);
    r.launches = exe.launches();
    return r;
  }

  models::ModelConfig cfg;
  Module m;
  Graph* g = nullptr;
  Bindings env;
};

std::string tuningFile(const std::string& dir) {
  const rt::DeviceInfo dev = rt::openDevice();
  return dir + "/" + rt::GemmTuningCache::fileName(dev.name, dev.target.major * 10 + dev.target.minor, cublasLtGetVersion());
}

// The file as a new process would read it.
rt::GemmTuningCache reread(const std::string& dir) {
  const rt::DeviceInfo dev = rt::openDevice();
  return rt::GemmTuningCache(dir, dev.name, dev.target.major * 10 + dev.target.minor, cublasLtGetVersion());
}

size_t countGemms(const StepResult& r, rt::GemmTuning::Source source) {
  size_t n = 0;
  for (const auto& l : r.launches)
    if (l.kind == rt::LaunchInfo::Kind::Gemm && l.gemmTuning && l.gemmTuning->source == source) ++n;
  return n;
}

TEST_F(GemmAutotune, SecondExecutableLoadsTheCacheInsteadOfTuning) {
  TempDir dir("second");
  codegen::CubinCache cache(dir.path);
  rt::ExecutableOptions opts;
  opts.cache = &cache;
  const StepResult first = step(opts);
  size_t gemms = 0;
  int widest = 0;
  for (const auto& l : first.launches) {
    if (l.kind != rt::LaunchInfo::Kind::Gemm) {
      EXPECT_FALSE(l.gemmTuning) << l.name;
      continue;
    }
    ++gemms;
    ASSERT_TRUE(l.gemmTuning) << l.name;
    EXPECT_EQ(l.gemmTuning->source, rt::GemmTuning::Source::Tuned) << l.name;
    EXPECT_GE(l.gemmTuning->candidates, 1) << l.name;
    EXPECT_GT(l.gemmTuning->tunedMs, 0) << l.name;
    if (!std::isnan(l.gemmTuning->heuristicMs)) {
      EXPECT_LE(l.gemmTuning->tunedMs, l.gemmTuning->heuristicMs) << l.name;
    }
    widest = std::max(widest, l.gemmTuning->candidates);
  }
  EXPECT_GT(gemms, 10u);
  EXPECT_GT(widest, 1) << "the heuristic offered more than one algorithm for some GEMM";

  const std::string file = tuningFile(dir.path);
  ASSERT_TRUE(std::filesystem::exists(file)) << file;
  const std::string saved = readAll(file);
  {
    testing::internal::CaptureStderr();
    rt::GemmTuningCache disk = reread(dir.path);
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
    EXPECT_GE(disk.size(), 3u);
    EXPECT_LE(disk.size(), gemms);
    // Every choice is in the file (keys are internal: match by the algorithm's bytes).
    const std::string text = readAll(file);
    for (const auto& l : first.launches)
      if (l.gemmTuning) {
        char word[17];
        std::snprintf(word, sizeof word, "%016llx", (unsigned long long)l.gemmTuning->algo[0]);
        EXPECT_NE(text.find(word), std::string::npos) << l.name;
      }
  }

  const StepResult second = step(opts);
  EXPECT_EQ(countGemms(second, rt::GemmTuning::Source::Cached), gemms) << "nothing is tuned again";
  for (size_t i = 0; i < first.launches.size(); ++i)
    if (first.launches[i].gemmTuning) {
      EXPECT_EQ(second.launches[i].gemmTuning->algo, first.launches[i].gemmTuning->algo) << first.launches[i].name;
      EXPECT_EQ(second.launches[i].gemmTuning->tunedMs, first.launches[i].gemmTuning->tunedMs) << first.launches[i].name;
    }
  EXPECT_EQ(readAll(file), saved) << "a warm run does not rewrite the cache";
  EXPECT_NEAR(second.loss, first.loss, 1e-5 * std::abs(first.loss)) << "same algorithms, same inputs";

  // Off by option, then by environment: cuBLASLt's heuristic, untimed; the loss agrees
  // within bf16 tolerance (other algorithms sum in another order).
  rt::ExecutableOptions off = opts;
  off.gemmAutotune = false;
  const StepResult heuristic = step(off);
  EXPECT_EQ(countGemms(heuristic, rt::GemmTuning::Source::Heuristic), gemms);
  for (const auto& l : heuristic.launches)
    if (l.gemmTuning) {
      EXPECT_EQ(l.gemmTuning->candidates, 0) << l.name;
    }
  EXPECT_NEAR(heuristic.loss, first.loss, 2e-2 * std::abs(first.loss));
  ASSERT_EQ(::setenv("FUSEC_GEMM_AUTOTUNE", "0", 1), 0);
  const StepResult envOff = step(opts);
  EXPECT_EQ(countGemms(envOff, rt::GemmTuning::Source::Heuristic), gemms);
  ::setenv("FUSEC_GEMM_AUTOTUNE", "yes", 1);
  try {
    step(opts);
    ADD_FAILURE() << "FUSEC_GEMM_AUTOTUNE=yes was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "FUSEC_GEMM_AUTOTUNE must be 0 or 1, got 'yes'");
  }
  ::unsetenv("FUSEC_GEMM_AUTOTUNE");
}

// A cache file damaged between runs: one warning, the GEMMs are tuned again, the step runs.
// A damaged file (a crash or a disk fault): one warning, every GEMM tuned, the file replaced.
TEST_F(GemmAutotune, CorruptCacheIsRetuned) {
  TempDir dir("corrupt");
  std::filesystem::create_directories(dir.path);
  const std::string file = tuningFile(dir.path);
  { std::ofstream(file, std::ios::trunc) << "{\"format\": \"fusec-gemm-tuning-2\", \"entr"; }
  codegen::CubinCache cache(dir.path);
  rt::ExecutableOptions opts;
  opts.cache = &cache;
  testing::internal::CaptureStderr();
  const StepResult tuned = step(opts);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("warning: ignoring the GEMM tuning cache " + file), std::string::npos) << err;
  size_t gemms = 0;
  for (const auto& l : tuned.launches) gemms += l.kind == rt::LaunchInfo::Kind::Gemm;
  EXPECT_EQ(countGemms(tuned, rt::GemmTuning::Source::Tuned), gemms);
  testing::internal::CaptureStderr();
  EXPECT_GE(reread(dir.path).size(), 3u);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << "the file was replaced by a good one";
}

}  // namespace
}  // namespace fusec
