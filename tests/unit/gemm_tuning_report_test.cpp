// `fusec profile`'s GEMM autotuning section (bench/gemm_tuning_report.h): launches grouped by
// group and choice, gain and time saved per step from the per-call medians, untimed choices
// shown as "-" / null, and the section's place in formatProfile's table and JSON.
#include <gtest/gtest.h>

#include <cmath>

#include "bench/gemm_tuning_report.h"
#include "bench/profile.h"

namespace fusec {
namespace {

rt::GemmTuning timed(double heuristic, double chosen, const char* algo, int candidates = 12) {
  rt::GemmTuning t;
  t.algoDesc = algo;
  t.candidates = candidates;
  t.heuristicMs = heuristic;
  t.tunedMs = chosen;
  t.source = rt::GemmTuning::Source::Tuned;
  return t;
}

TEST(GemmTuningReport, RowsGroupAndSaveTime) {
  std::vector<bench::GemmTuningLaunch> launches = {
      {"gemm 1024x2304x768", 1, timed(0.040, 0.030, "algo 66 tile 20")},
      {"gemm 1024x2304x768", 1, timed(0.040, 0.030, "algo 66 tile 20")},
      {"gemm 1024x768x768 (bwd)", 1, timed(0.020, 0.019, "algo 66 tile 18")},
      {"attention gemm 256x256x64 x48", 2, timed(0.010, 0.005, "algo 31 tile 7")},
  };
  auto rows = bench::gemmTuningRows(launches);
  ASSERT_EQ(rows.size(), 3u);
  // By time saved per step: 2 x 0.010 = 0.020 (two launches), then 2 calls x 0.005 = 0.010, then 0.001.
  EXPECT_EQ(rows[0].gemm, "gemm 1024x2304x768");
  EXPECT_EQ(rows[0].launches, 2);
  EXPECT_NEAR(rows[0].savedMs(), 0.020, 1e-12);
  EXPECT_NEAR(rows[0].gain(), 0.040 / 0.030, 1e-12);
  EXPECT_EQ(rows[1].gemm, "attention gemm 256x256x64 x48");
  EXPECT_EQ(rows[1].calls, 2);
  EXPECT_NEAR(rows[1].savedMs(), 0.010, 1e-12);
  EXPECT_EQ(rows[2].source, "tuned");

  const std::string table = bench::gemmTuningTable(launches);
  for (const char* part : {"### GEMM autotuning", "| gemm 1024x2304x768 ", "| 1.33x ", "algo 31 tile 7",
                           "Estimated time saved per step by autotuning: 0.031 ms (3 of 3 GEMM groups timed)"})
    EXPECT_NE(table.find(part), std::string::npos) << part << "\n" << table;

  auto j = bench::gemmTuningJson(launches);
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j[0]["launches"], 2);
  EXPECT_EQ(j[0]["source"], "tuned");
  EXPECT_NEAR(j[0]["chosen_ms"].get<double>(), 0.030, 1e-12);
  EXPECT_NEAR(j[0]["saved_ms_per_step"].get<double>(), 0.020, 1e-12);
}

// Autotuning off: the heuristic's algorithm, no times, and the table says why.
TEST(GemmTuningReport, UntimedChoices) {
  rt::GemmTuning h;
  h.algoDesc = "algo 66 tile 20";
  std::vector<bench::GemmTuningLaunch> launches = {{"gemm 64x64x64", 1, h}};
  const std::string table = bench::gemmTuningTable(launches);
  EXPECT_NE(table.find("| heuristic "), std::string::npos) << table;
  EXPECT_NE(table.find("| - "), std::string::npos) << table;
  EXPECT_NE(table.find("No GEMM was timed"), std::string::npos) << table;
  auto j = bench::gemmTuningJson(launches);
  EXPECT_TRUE(j[0]["heuristic_ms"].is_null());
  EXPECT_TRUE(j[0]["gain"].is_null());
  EXPECT_EQ(bench::gemmTuningTable({}), "");
  EXPECT_TRUE(bench::gemmTuningJson({}).empty());
}

// The time each GEMM took in the step against its tuned time: per call, the ratio, and the total.
TEST(GemmTuningReport, InTheStepAgainstTuned) {
  std::vector<bench::GemmTuningLaunch> launches = {
      {"gemm 1024x2304x768", 1, timed(0.040, 0.030, "algo 66 tile 20"), 0.033},
      {"gemm 1024x2304x768", 1, timed(0.040, 0.030, "algo 66 tile 20"), 0.036},
      {"attention gemm 256x256x64 x48", 2, timed(0.010, 0.005, "algo 31 tile 7"), 0.012},
      {"gemm 64x64x64", 1, timed(0.002, 0.001, "algo 1")},  // not measured in the step
  };
  auto rows = bench::gemmTuningRows(launches);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_NEAR(rows[0].stepMsPerCall(), 0.0345, 1e-12);
  EXPECT_NEAR(rows[0].stepOverTuned(), 1.15, 1e-12);
  EXPECT_NEAR(rows[1].stepMsPerCall(), 0.006, 1e-12);  // two calls a launch
  EXPECT_TRUE(std::isnan(rows[2].stepOverTuned()));
  const std::string table = bench::gemmTuningTable(launches);
  for (const char* part : {"| In step (ms) ", "| 0.0345 ", "| 1.15x ",
                           "In the step these GEMMs took 0.081 ms, against 0.070 ms at the times they were tuned at (1.16x)"})
    EXPECT_NE(table.find(part), std::string::npos) << part << "\n" << table;
  auto j = bench::gemmTuningJson(launches);
  EXPECT_NEAR(j[0]["step_over_chosen"].get<double>(), 1.15, 1e-12);
  EXPECT_TRUE(j[2]["step_ms_per_call"].is_null());
}

TEST(GemmTuningReport, InTheProfile) {
  bench::ProgramProfile p;
  p.program = "forward";
  bench::LaunchClass c;
  c.name = "%y (64x64x64)";
  c.group = "gemm 64x64x64";
  c.gemm = true;
  c.category = bench::LaunchCategory::Gemm;
  p.launches = {c};
  p.ms = {0.01};
  p.gemmTuning = {{"gemm 64x64x64", 1, timed(0.012, 0.010, "algo 1")}};
  const std::string table = bench::formatProfile("h", {p}, bench::Format::Table);
  EXPECT_NE(table.find("### GEMM autotuning"), std::string::npos) << table;
  auto j = nlohmann::json::parse(bench::formatProfile("h", {p}, bench::Format::Json));
  EXPECT_EQ(j["programs"][0]["gemm_tuning"][0]["algo"], "algo 1");
}

}  // namespace
}  // namespace fusec
