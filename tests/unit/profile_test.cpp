// fusec profile's CPU side: launch categories and kernel groups decided from planned graphs
// (the tiny model's forward and train_step in fp32 and bf16, the attention programs), and the
// report's tables and JSON on random non-zero launch times.
#include <gtest/gtest.h>

#include <cstdio>

#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "bench/profile.h"
#include "bench/program.h"
#include "frontend/models/zoo_model.h"
#include "ir/collectives.h"
#include "ir/parser.h"
#include "frontend/models/attention.h"
#include "passes/launch_stats.h"
#include "random_profile.h"
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
  Graph& g = bench::buildProgram(m, *models::transformerModel(cfg), pass, dtype, 2, 16, models::AdamWConfig{});
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
  EXPECT_EQ(kernels[LaunchCategory::ColReduce], 0);  // norm-weight gradients: in the rmsnorm backward
  EXPECT_GT(kernels[LaunchCategory::Pointwise], 0);
  // None: the embedding's gradient scatter is its AdamW kernel (one of the L + 3), and the
  // loss mean is cross-entropy's total.
  EXPECT_EQ(kernels[LaunchCategory::Other], 0);
  int softmax = 0, backward = 0, embeddingUpdates = 0;
  for (const auto& l : step) {
    if (l.group == "scatter_*_embedding_adamw") {
      ++embeddingUpdates;
      EXPECT_EQ(l.category, LaunchCategory::Optimizer);
    }
    softmax += l.group == "row_reduce_*_softmax" && !l.backward;  // bf16 backward recomputes P: a softmax too
    backward += l.backward;
    if (l.gemm) {
      EXPECT_EQ(l.group.rfind(l.category == LaunchCategory::Attention ? "attention gemm " : "gemm ", 0), 0u) << l.group;
    }
  }
  EXPECT_EQ(softmax, L);
  EXPECT_EQ(embeddingUpdates, 1);
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

// A rank's data-parallel step: every collective is a launch of the comm category (named by
// the runtime), left out of the sum of launch times (it runs beside the compute); the report
// gives the exposed collective time of the replay.
TEST(ProfileClassify, DataParallelCollectivesAreCommLaunches) {
  const models::ModelConfig cfg = models::namedConfig("tiny");
  Module m;
  Graph& g = bench::buildProgram(m, *models::transformerModel(cfg), bench::BenchPass::Step, DType::bf16, 2, 16,
                                 models::AdamWConfig{}, AttentionLowering::Default, nullptr, DataParallelConfig{2, 4096});
  int collectives = 0;
  for (const auto& op : g.ops) collectives += communicates(op->kind);
  auto ls = bench::classifyLaunches(g);
  int gemms = 0;
  for (const auto& l : ls) gemms += l.gemm;
  EXPECT_EQ(gemms, launchStats(g).gemms);
  EXPECT_GT(collectives, 2);  // the loss and several buckets
  bench::ProgramProfile p;
  p.program = "train_step";
  p.launches = ls;
  p.ranks = 2;
  double compute = 0;
  int comm = 0;
  for (const auto& l : ls) {
    const double ms = l.category == LaunchCategory::Comm ? 5.0 : 0.25;
    p.ms.push_back(ms);
    if (l.category == LaunchCategory::Comm) {
      ++comm;
      EXPECT_EQ(l.family, "comm");
      EXPECT_FALSE(l.gemm);
    } else {
      compute += ms;
    }
  }
  EXPECT_EQ(comm, collectives);
  EXPECT_DOUBLE_EQ(p.totalMs(), compute);
  p.overlap = rt::StepOverlap{20.0, 18.0, 6.0, 0.5};
  const std::string text = bench::formatProfile("h", {p}, bench::Format::Table);
  EXPECT_NE(text.find("| comm "), std::string::npos) << text;
  EXPECT_NE(text.find("Collectives (comm, on their own stream, rank 0 of 2): step 20.00 ms: compute 18.00 ms, "
                      "collectives 6.00 ms, exposed 0.50 ms (2.5% of the step)"),
            std::string::npos)
      << text;
  const auto j = nlohmann::json::parse(bench::formatProfile("h", {p}, bench::Format::Json));
  EXPECT_DOUBLE_EQ(j["programs"][0]["overlap"]["exposed_comm_ms"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["programs"][0]["overlap"]["exposed_share"].get<double>(), 0.025);
}

using test::randomProfile;

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

  EXPECT_EQ(j["programs"][0]["timing"], "events");

  // Kernel durations (CUPTI) leave the time between kernels out of the sum: the graph line
  // says how much that is, where event times said how much launch overhead they carried.
  EXPECT_NE(table.find("(launch overhead: "), std::string::npos);
  EXPECT_EQ(bench::timingDescription(ps), "CUDA events around each launch, launched one by one");
  for (auto& p : ps) p.kernelTimes = true;
  const std::string kernels = bench::formatProfile("tiny fp32", ps, bench::Format::Table);
  EXPECT_NE(kernels.find("(between kernels: " + [&] {
              char b[32];
              std::snprintf(b, sizeof b, "%.3f ms", *ps[0].graphMs - ps[0].totalMs());
              return std::string(b);
            }()),
            std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(bench::formatProfile("x", ps, bench::Format::Json))["programs"][1]["timing"], "kernels");
  EXPECT_EQ(bench::timingDescription(ps), "kernel durations on the device (CUPTI) in the step's CUDA graph");
  ps[0].kernelTimes = false;
  EXPECT_EQ(bench::timingDescription(ps), "kernel durations on the device (CUPTI) in the step's CUDA graph for some "
                                          "programs, CUDA events around each launch, launched one by one");

  test::expectError([&] { bench::formatProfile("x", ps, bench::Format::Csv); }, "not csv");
  ps[0].ms.pop_back();
  test::expectError([&] { bench::formatProfile("x", ps, bench::Format::Table); }, "launch times for");
}

// Roofline accounting: a GEMM moves A, B and C once and does 2*M*N*K FLOPs; a kernel moves
// its distinct operands and its results; rates and percentages follow from the ceilings.
TEST(ProfileRoofline, TrafficOfLaunches) {
  auto m = parseModule(
      "func @f {\n"
      "  %a = input() {name = \"a\"} : bf16[64,32]\n"
      "  %w = param() {name = \"w\"} : bf16[16,32]\n"
      "  %y = matmul(%a, %w) {transpose_b = true} : bf16[64,16]\n"
      "  %k = kernel(%y, %y) {name = \"k0\"} : f32[64,16] {\n"
      "    %p = input() {name = \"p\"} : bf16[64,16]\n"
      "    %q = input() {name = \"q\"} : bf16[64,16]\n"
      "    %s = add(%p, %q) : bf16[64,16]\n"
      "    %c = cast(%s) : f32[64,16]\n"
      "    return %c\n"
      "  }\n"
      "  return %k\n"
      "}\n",
      "roofline.fir");
  const Graph& g = *m->funcs[0];
  const Op& mm = *g.ops[2];
  const Op& k = *g.ops[3];
  const bench::LaunchTraffic t = bench::launchTraffic(mm);
  EXPECT_EQ(t.bytesRead, (64 * 32 + 16 * 32) * 2);
  EXPECT_EQ(t.bytesWritten, 64 * 16 * 2);
  EXPECT_EQ(t.flops, 2 * 64 * 16 * 32);
  EXPECT_EQ(t.gemmDtype, DType::bf16);
  const bench::LaunchTraffic u = bench::launchTraffic(k);
  EXPECT_EQ(u.bytesRead, 64 * 16 * 2) << "one operand passed twice is read once";
  EXPECT_EQ(u.bytesWritten, 64 * 16 * 4);
  EXPECT_EQ(u.flops, 0);
  test::expectError([&] { bench::launchTraffic(*g.ops[0]); }, "is not a launch");

  // 1 GB in 1 ms is 1000 GB/s: 25% of a 4000 GB/s copy ceiling; 1 TFLOP in 2 ms at a
  // 1000 TFLOP/s ceiling is 500 TFLOP/s, 50% of it.
  bench::ProfileRow r;
  r.ms = 2;
  r.bytes = 2'000'000'000;
  r.flops = 1'000'000'000'000;
  r.gemmFloorMs = bench::floorMs(0, r.flops, 0, 1000);
  r.floorMs = bench::floorMs(r.bytes, r.flops, 4000, 1000);
  const bench::Ceilings c{1000, 50, 4000};
  const bench::RooflineFigures f = bench::rooflineFigures(r, c);
  EXPECT_NEAR(f.gbps, 1000, 1e-9);
  EXPECT_NEAR(f.copyPct, 25, 1e-9);
  EXPECT_NEAR(f.tflops, 500, 1e-9);
  EXPECT_NEAR(f.gemmPct, 50, 1e-9);
  EXPECT_NEAR(f.floorPct, 50, 1e-9);  // max(0.5 ms of bytes, 1 ms of FLOPs) over 2 ms
}

// With ceilings, every row of the table and the JSON carries the roofline columns.
TEST(ProfileRoofline, ReportColumns) {
  std::mt19937 rng(3);
  bench::ProgramProfile p = randomProfile("train_step", bench::BenchPass::Step, rng);
  p.ceilings = bench::Ceilings{800, 50, 4000};
  const std::string table = bench::formatProfile("tiny fp32", {p}, bench::Format::Table);
  for (const char* part : {"Ceilings measured in this run: copy 4000 GB/s", "| MB moved |", "| % copy |", "| % floor |"})
    EXPECT_NE(table.find(part), std::string::npos) << part;
  auto j = nlohmann::json::parse(bench::formatProfile("tiny fp32", {p}, bench::Format::Json));
  EXPECT_EQ(j["programs"][0]["ceilings"]["copy_gbps"].get<double>(), 4000);
  int64_t bytes = 0;
  for (const auto& r : j["programs"][0]["categories"]) {
    bytes += r["bytes"].get<int64_t>();
    EXPECT_TRUE(r.contains("floor_pct"));
    if (r["ms"].get<double>() > 0) {
      EXPECT_GT(r["floor_pct"].get<double>(), 0) << r.dump();
    }
  }
  int64_t want = 0;
  for (const auto& l : p.launches) want += l.traffic.bytes();
  EXPECT_EQ(bytes, want);
  // Without ceilings: rates but no percentages.
  p.ceilings = {};
  auto k = nlohmann::json::parse(bench::formatProfile("tiny fp32", {p}, bench::Format::Json));
  EXPECT_FALSE(k["programs"][0].contains("ceilings"));
  EXPECT_FALSE(k["programs"][0]["categories"][0].contains("copy_pct"));
}

TEST(ProfileReport, MedianPerLaunch) {
  auto m = bench::medianPerLaunch({{1, 5}, {3, 2}, {2, 9}, {4, 1}});
  EXPECT_DOUBLE_EQ(m[0], 2.5);
  EXPECT_DOUBLE_EQ(m[1], 3.5);
  test::expectError([] { bench::medianPerLaunch({{1, 2}, {1}}); }, "different lengths");
}

}  // namespace
}  // namespace fusec
