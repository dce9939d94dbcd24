// fusec profile's CPU side: launch categories and kernel groups decided from planned graphs
// (the tiny model's forward and train_step in fp32 and bf16, the attention programs), and the
// report's tables and JSON on random non-zero launch times.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "bench/profile.h"
#include "bench/program.h"
#include "frontend/models/attention.h"
#include "passes/launch_stats.h"
#include "test_util.h"

namespace fusec {
namespace {

using bench::LaunchCategory;

std::map<LaunchCategory, int> countByCategory(const std::vector<bench::LaunchClass>& ls, bool gemm) {
  std::map<LaunchCategory, int> n;
  for (const auto& l : ls)
    if (l.gemm == gemm) n[l.category]++;
  return n;
}

std::vector<bench::LaunchClass> classify(bench::BenchPass pass, DType dtype, const models::ModelConfig& cfg) {
  Module m;
  Graph& g = bench::buildProgram(m, cfg, pass, dtype, 2, 16, models::AdamWConfig{});
  auto ls = bench::classifyLaunches(g);
  EXPECT_EQ(int64_t(ls.size()), launchStats(g).launches());
  return ls;
}

TEST(ProfileClassify, KernelGroupName) {
  EXPECT_EQ(bench::kernelGroupName("row_reduce_12_softmax"), "row_reduce_*_softmax");
  EXPECT_EQ(bench::kernelGroupName("pointwise_3_rope"), "pointwise_*_rope");
  EXPECT_EQ(bench::kernelGroupName("reduce_all_7"), "reduce_all_*");
  EXPECT_EQ(bench::kernelGroupName("custom"), "custom");
}

class ProfileDtype : public ::testing::TestWithParam<DType> {};

// Per layer, forward: QK^T and PV GEMMs and the softmax; backward adds dO V^T, P^T dO, dS K,
// dS^T Q and the softmax backward. Every layer has its AdamW kernel, and so do the three
// non-layer params (embedding, final norm, lm_head).
TEST_P(ProfileDtype, TinyTrainStepAndForward) {
  const models::ModelConfig cfg = models::namedConfig("tiny");
  const int L = int(cfg.layers);
  auto step = classify(bench::BenchPass::Step, GetParam(), cfg);
  auto gemms = countByCategory(step, true), kernels = countByCategory(step, false);
  EXPECT_EQ(gemms[LaunchCategory::Attention], 6 * L);
  EXPECT_EQ(kernels[LaunchCategory::Attention], 2 * L);
  EXPECT_EQ(kernels[LaunchCategory::Optimizer], L + 3);
  EXPECT_GT(gemms[LaunchCategory::Gemm], 0);
  EXPECT_GT(kernels[LaunchCategory::RowReduce], 0);
  EXPECT_GT(kernels[LaunchCategory::ColReduce], 0);
  EXPECT_GT(kernels[LaunchCategory::Pointwise], 0);
  EXPECT_EQ(kernels[LaunchCategory::Other], 2);  // the loss mean and the embedding scatter
  int softmax = 0, backward = 0;
  for (const auto& l : step) {
    softmax += l.group == "row_reduce_*_softmax" && !l.backward;  // bf16 backward recomputes P: a softmax too
    backward += l.backward;
    if (l.gemm) EXPECT_EQ(l.group.rfind(l.category == LaunchCategory::Attention ? "attention gemm " : "gemm ", 0), 0u) << l.group;
  }
  EXPECT_EQ(softmax, L);
  EXPECT_GT(backward, int(step.size()) / 2);

  auto fwd = classify(bench::BenchPass::Forward, GetParam(), cfg);
  EXPECT_EQ(countByCategory(fwd, true)[LaunchCategory::Attention], 2 * L);
  EXPECT_EQ(countByCategory(fwd, false)[LaunchCategory::Attention], L);
  EXPECT_EQ(countByCategory(fwd, false)[LaunchCategory::Optimizer], 0);
  for (const auto& l : fwd) EXPECT_FALSE(l.backward) << l.name;
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ProfileDtype, ::testing::Values(DType::f32, DType::bf16));

// The attention programs are nothing but attention: every launch is in that category.
TEST(ProfileClassify, AttentionProgramsAreAllAttention) {
  for (const auto& program : models::attentionProgramNames()) {
    auto m = models::compileAttentionProgram(program, 2, 32, 16);
    auto ls = bench::classifyLaunches(*m->funcs.front());
    int gemms = 0;
    for (const auto& l : ls) {
      EXPECT_EQ(l.category, LaunchCategory::Attention) << program << ": " << l.name;
      gemms += l.gemm;
    }
    EXPECT_EQ(gemms, program == "attention" ? 2 : 5) << program;  // backward: QK^T, dO V^T, P^T dO, dS K, dS^T Q
  }
}

bench::ProgramProfile randomProfile(const char* program, bench::BenchPass pass, std::mt19937& rng) {
  Module m;
  Graph& g = bench::buildProgram(m, models::namedConfig("tiny"), pass, DType::f32, 2, 16, models::AdamWConfig{});
  bench::ProgramProfile p;
  p.program = program;
  p.launches = bench::classifyLaunches(g);
  std::uniform_real_distribution<double> ms(0.005, 0.5);
  for (size_t i = 0; i < p.launches.size(); ++i) p.ms.push_back(ms(rng));
  p.graphMs = 0.8 * p.totalMs();
  return p;
}

TEST(ProfileReport, SharesAndGroups) {
  std::mt19937 rng(7);
  bench::ProgramProfile p = randomProfile("train_step", bench::BenchPass::Step, rng);
  for (const auto& rows : {bench::byCategory(p), bench::byKernel(p)}) {
    double share = 0, ms = 0;
    int64_t count = 0;
    for (const auto& r : rows) share += r.share, ms += r.ms, count += r.count;
    EXPECT_NEAR(share, 1, 1e-9);
    EXPECT_NEAR(ms, p.totalMs(), 1e-9);
    EXPECT_EQ(count, int64_t(p.launches.size()));
  }
  EXPECT_EQ(bench::byCategory(p).size(), size_t(bench::kNumCategories));
  auto kernels = bench::byKernel(p);
  for (size_t i = 1; i < kernels.size(); ++i) EXPECT_GE(kernels[i - 1].ms, kernels[i].ms);
  auto top = bench::topNonGemm(p);
  EXPECT_EQ(top.size(), 10u);
  for (const auto& r : top) EXPECT_EQ(r.key.find("gemm"), std::string::npos) << r.key;
  // The two layers' forward softmax kernels are one group.
  auto it = std::find_if(kernels.begin(), kernels.end(), [](auto& r) { return r.key == "row_reduce_*_softmax"; });
  ASSERT_NE(it, kernels.end());
  EXPECT_EQ(it->count, 2);
  EXPECT_EQ(it->category, "attention");
}

TEST(ProfileReport, Formats) {
  std::mt19937 rng(11);
  std::vector<bench::ProgramProfile> ps = {randomProfile("forward", bench::BenchPass::Forward, rng),
                                           randomProfile("train_step", bench::BenchPass::Step, rng)};
  const std::string table = bench::formatProfile("tiny fp32", ps, bench::Format::Table);
  for (const char* part : {"# tiny fp32\n", "## forward: ", "## train_step: ", "| Category ", "### Top 10 non-GEMM kernels",
                           "whole step as one CUDA graph", "GEMM share of launch time", "row_reduce_*_softmax"})
    EXPECT_NE(table.find(part), std::string::npos) << part;

  auto j = nlohmann::json::parse(bench::formatProfile("tiny fp32", ps, bench::Format::Json));
  ASSERT_EQ(j["programs"].size(), 2u);
  EXPECT_EQ(j["programs"][1]["program"], "train_step");
  double share = 0;
  for (const auto& r : j["programs"][1]["categories"]) share += r["share"].get<double>();
  EXPECT_NEAR(share, 1, 1e-9);
  EXPECT_NEAR(j["programs"][0]["graph_ms"].get<double>(), *ps[0].graphMs, 1e-9);
  EXPECT_GT(j["programs"][0]["gemm_share"].get<double>(), 0);

  test::expectError([&] { bench::formatProfile("x", ps, bench::Format::Csv); }, "not csv");
  ps[0].ms.pop_back();
  test::expectError([&] { bench::formatProfile("x", ps, bench::Format::Table); }, "launch times for");
}

TEST(ProfileReport, MedianPerLaunch) {
  auto m = bench::medianPerLaunch({{1, 5}, {3, 2}, {2, 9}, {4, 1}});
  EXPECT_DOUBLE_EQ(m[0], 2.5);
  EXPECT_DOUBLE_EQ(m[1], 3.5);
  test::expectError([] { bench::medianPerLaunch({{1, 2}, {1}}); }, "different lengths");
}

}  // namespace
}  // namespace fusec
