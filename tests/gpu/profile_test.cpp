// fusec profile and fusec bench attention on the device: tiny programs, few iterations; the
// output's structure and that the category shares sum to 100%. Without a device, the
// one-line "no CUDA device" and exit 1 (this part runs in CI).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/device.h"
#include "run_fusec.h"
#include "trace_checks.h"

namespace fusec {
namespace {

using test::runFusec;


TEST(Profile, NoDeviceFailsFast) {
  if (rt::deviceAvailable()) GTEST_SKIP() << "a CUDA device is present";
  for (const char* args : {"profile --model small --program train_step", "bench attention --seq 256 --d 16"}) {
    auto [out, rc] = runFusec(args);
    EXPECT_EQ(out, "error: no CUDA device\n") << args;
    EXPECT_EQ(rc, 1) << args;
  }
}

class ProfileOnDevice : public ::testing::TestWithParam<const char*> {};

TEST_P(ProfileOnDevice, TinyTrainStepSharesSumTo100) {
  std::string why;
  if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  auto [out, rc] = runFusec(std::string("profile --model tiny --ctx 16 --batch 2 --iters 3 --format json --dtype ") +
                                GetParam(),
                            false);
  ASSERT_EQ(rc, 0) << out;
  auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j["programs"].size(), 2u);
  EXPECT_EQ(j["programs"][0]["program"], "forward");
  EXPECT_EQ(j["programs"][1]["program"], "train_step");
  for (const auto& p : j["programs"]) {
    double share = 0, ms = 0;
    int64_t launches = 0;
    for (const auto& r : p["categories"]) share += r["share"].get<double>(), ms += r["ms"].get<double>(), launches += r["count"].get<int64_t>();
    EXPECT_NEAR(share, 1, 1e-6);
    EXPECT_NEAR(ms, p["launch_sum_ms"].get<double>(), 1e-6);
    EXPECT_EQ(launches, p["launches"].get<int64_t>());
    EXPECT_GT(p["launch_sum_ms"].get<double>(), 0);
    EXPECT_GT(p["graph_ms"].get<double>(), 0);
    EXPECT_GT(p["gemm_share"].get<double>(), 0);
    EXPECT_LE(p["top_non_gemm"].size(), 10u);
    // Every GEMM launch has its algorithm choice, tuned now or loaded from the user's cache.
    int64_t tunedLaunches = 0;
    for (const auto& r : p["gemm_tuning"]) {
      tunedLaunches += r["launches"].get<int64_t>();
      EXPECT_TRUE(r["source"] == "tuned" || r["source"] == "cached") << r;
      EXPECT_GE(r["candidates"].get<int>(), 1) << r;
      if (!r["heuristic_ms"].is_null()) {
        EXPECT_LE(r["chosen_ms"].get<double>(), r["heuristic_ms"].get<double>()) << r;
      }
    }
    int64_t gemmLaunches = 0;
    for (const auto& r : p["kernels"])
      if (r["category"] == "gemm" || r["name"].get<std::string>().find("gemm ") != std::string::npos)
        gemmLaunches += r["count"].get<int64_t>();
    EXPECT_EQ(tunedLaunches, gemmLaunches);
  }
  // The backward's GEMMs are there: the step has more launches than the forward.
  EXPECT_GT(j["programs"][1]["launches"].get<int64_t>(), j["programs"][0]["launches"].get<int64_t>());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ProfileOnDevice, ::testing::Values("fp32", "bf16"));

// --trace: the Chrome trace of the same run, one slice per launch the profile counted.
TEST(Profile, TraceOnDevice) {
  std::string why;
  if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  test::ScratchDir d("fusec_gpu_trace");
  const std::string trace = d.path + "/trace.json";
  auto [out, rc] = runFusec("profile --model tiny --ctx 16 --batch 2 --iters 3 --format json --dtype bf16 --trace " + trace,
                            false);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  std::vector<std::pair<std::string, size_t>> programs;
  for (const auto& p : j["programs"]) programs.emplace_back(p["program"], p["launches"].get<size_t>());
  std::ifstream f(trace);
  test::checkChromeTrace(nlohmann::json::parse(f), programs);
  auto [bad, rc2] = runFusec("profile --model tiny --ctx 16 --batch 2 --trace /nonexistent/dir/t.json");
  EXPECT_EQ(rc2, 1);
  EXPECT_EQ(bad, "error: --trace /nonexistent/dir/t.json: no directory /nonexistent/dir\n");
}

TEST(Profile, TableOnDevice) {
  std::string why;
  if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  auto [out, rc] = runFusec("profile --model tiny --ctx 16 --batch 2 --iters 2 --program forward", false);
  ASSERT_EQ(rc, 0) << out;
  for (const char* part : {"## forward: ", "### By category", "| attention ", "attention_*_flash_fwd", "whole step as one CUDA graph",
                           "(only forward was profiled)", "### GEMM autotuning", "Estimated time saved per step"})
    EXPECT_NE(out.find(part), std::string::npos) << part << "\n" << out;
}

// --data: the step's tokens from a token file (a skewed one: most positions one token), named
// in the header; a train step runs on them.
TEST(Profile, TokensFromAFile) {
  std::string why;
  if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  const std::string path = std::filesystem::temp_directory_path() / ("fusec_profile_tokens_" + std::to_string(::getpid()));
  {
    std::ofstream f(path, std::ios::binary);
    for (uint16_t k = 0; k < 400; ++k) {
      const uint16_t id = k % 5 == 0 ? uint16_t(k % 37) : uint16_t(3);
      f.write(reinterpret_cast<const char*>(&id), sizeof id);
    }
  }
  auto [out, rc] = runFusec("profile --model tiny --ctx 16 --batch 2 --iters 2 --data " + path, false);
  std::filesystem::remove(path);
  ASSERT_EQ(rc, 0) << out;
  for (const std::string& part : std::vector<std::string>{"tokens from " + path, "## train_step: ", "scatter_*_embedding_adamw"})
    EXPECT_NE(out.find(part), std::string::npos) << part << "\n" << out;
}

// The GEMM choices outlive the process: a second `fusec profile` with the same cache
// directory loads every algorithm the first one tuned (no GEMM is timed again).
TEST(Profile, SecondProcessLoadsTheGemmTuning) {
  std::string why;
  if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  const std::string dir = std::filesystem::temp_directory_path() / ("fusec_profile_tuning_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  ::setenv("XDG_CACHE_HOME", dir.c_str(), 1);
  const std::string args = "profile --model tiny --ctx 16 --batch 2 --iters 2 --program forward --format json";
  auto [first, rc1] = runFusec(args, false);
  auto [second, rc2] = runFusec(args, false);
  if (old) ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else ::unsetenv("XDG_CACHE_HOME");
  std::filesystem::remove_all(dir);
  ASSERT_EQ(rc1, 0) << first;
  ASSERT_EQ(rc2, 0) << second;
  const auto a = nlohmann::json::parse(first)["programs"][0]["gemm_tuning"];
  const auto b = nlohmann::json::parse(second)["programs"][0]["gemm_tuning"];
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["source"], "tuned") << a[i];
    EXPECT_EQ(b[i]["source"], "cached") << b[i];
    EXPECT_EQ(b[i]["algo"], a[i]["algo"]) << b[i];
    EXPECT_EQ(b[i]["chosen_ms"], a[i]["chosen_ms"]) << b[i];
  }
}

TEST(BenchAttention, SmallSweepOnDevice) {
  std::string why;
  if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  if (!test::eagerWorkerBuilt(&why)) GTEST_SKIP() << why;
  auto [out, rc] = runFusec("bench attention --batch 2 --d 16,32 --seq 64,256 --warmup 1 --iters 3 --format json", false);
  ASSERT_EQ(rc, 0) << out;
  std::istringstream lines(out);
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["status"], "OK") << line;  // "fusec was built without LibTorch" on eager rows fails here too
    EXPECT_GT(j["forward_ms"].get<double>(), 0) << line;
    EXPECT_GT(j["backward_ms"].get<double>(), 0) << line;
    EXPECT_GT(j["saved_for_backward_bytes"].get<int64_t>(), 0) << line;
    if (j["impl"] == "eager") {
      EXPECT_EQ(j["saved_for_backward_bytes"].get<int64_t>(), 2 * j["seq"].get<int64_t>() * j["seq"].get<int64_t>() * 4);
    }
    ++rows;
  }
  EXPECT_EQ(rows, 8);
}

}  // namespace
}  // namespace fusec
