// `fusec bench --gpus` (tools/fusec/bench_gpus.h) without GPUs: the GPU counts it accepts, the
// job it starts for a row, a row from `fusec run --report`'s JSON (the warm-up and the traced
// step left out), scaling efficiencies, and the data-parallel columns of the formats.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bench/report.h"
#include "bench/stats.h"
#include "test_util.h"
#include "tools/fusec/bench_gpus.h"

namespace fusec {
namespace {

using test::errorOf;

TEST(BenchGpus, GpuCountsAscendDistinctAndFitTheHost) {
  cli::checkGpuCounts({1, 2, 4}, 4);
  EXPECT_EQ(errorOf([] { cli::checkGpuCounts({2, 1}, 4); }), "--gpus: list the GPU counts in ascending order, each once");
  EXPECT_EQ(errorOf([] { cli::checkGpuCounts({1, 1}, 4); }), "--gpus: list the GPU counts in ascending order, each once");
  EXPECT_EQ(errorOf([] { cli::checkGpuCounts({0, 2}, 4); }), "--gpus: a GPU count must be at least 1, got 0");
  EXPECT_EQ(errorOf([] { cli::checkGpuCounts({1, 8}, 4); }), "--gpus 8: this host has 4 GPUs");
  EXPECT_EQ(errorOf([] { cli::checkGpuCounts({}, 4); }), "--gpus needs at least one GPU count");
}

TEST(BenchGpus, ARowIsAJobOfFusecRun) {
  EXPECT_EQ(cli::dataParallelRunCommand("/x/fusec", "small", 256, 64, "bf16", 4, 16, 0, "fused", "/t/r.json", "/t/t.json"),
            "'/x/fusec' run --gpus 4 --program train_step --model 'small' --dtype bf16 --random-inputs --batch 64 "
            "--ctx 256 --steps 16 --seed 0 --attention fused --report '/t/r.json' --timeline '/t/t.json'");
  EXPECT_EQ(cli::dataParallelRunCommand("fusec", "medium", 256, 16, "bf16", 2, 8, 0, "", "r.json", "t.json", true),
            "'fusec' run --gpus 2 --shard-optimizer --program train_step --model 'medium' --dtype bf16 --random-inputs "
            "--batch 16 --ctx 256 --steps 8 --seed 0 --report 'r.json' --timeline 't.json'");
  // One GPU: no job, no collectives to trace, nothing to shard.
  EXPECT_EQ(cli::dataParallelRunCommand("fusec", "medium", 256, 16, "bf16", 1, 8, 0, "", "r.json", "t.json", true),
            "'fusec' run --program train_step --model 'medium' --dtype bf16 --random-inputs --batch 16 --ctx 256 "
            "--steps 8 --seed 0 --report 'r.json'");
  EXPECT_EQ(cli::dataParallelRunCommand("fusec", "medium", 256, 16, "fp32", 1, 8, 3, "naive", "r.json", "t.json"),
            "'fusec' run --program train_step --model 'medium' --dtype fp32 --random-inputs --batch 16 --ctx 256 "
            "--steps 8 --seed 3 --attention naive --report 'r.json'");
}

const char* kReport = R"({"model": "small", "dtype": "bf16", "batch": 64, "ctx": 256, "gpus": 2, "first_step": 1,
  "steps_ms": [900, 80, 31, 29, 30, 28, 60], "traced_last_step": true, "stopped": "",
  "overlap": {"step_ms": 30.5, "compute_ms": 29.0, "comm_ms": 5.0, "exposed_comm_ms": 0.75}})";

TEST(BenchGpus, ARowIsTheTimedStepsOfTheReport) {
  const bench::BenchRow r = cli::dataParallelRow(kReport, 2, 4);
  EXPECT_EQ(r.model, "small");
  EXPECT_EQ(r.gpus, 2);
  EXPECT_EQ(r.pass, "step");
  EXPECT_EQ(r.impl, "compiled");
  ASSERT_TRUE(r.ms);
  EXPECT_EQ(r.ms->n, 4);
  EXPECT_DOUBLE_EQ(r.ms->min, 28);  // steps 3..6: the 900 ms first step and the traced 60 ms last one are out
  EXPECT_DOUBLE_EQ(r.ms->max, 31);
  ASSERT_TRUE(r.exposedCommMs);
  EXPECT_DOUBLE_EQ(*r.exposedCommMs, 0.75);
  // Every GPU's tokens: 2 x 64 x 256 per step.
  EXPECT_NEAR(*r.tokensPerSecond(), 2.0 * 64 * 256 / (r.ms->median / 1e3), 1e-6);
  EXPECT_EQ(errorOf([] { cli::dataParallelRow(kReport, 5, 4); }),
            "fusec run's report has 7 steps, not 9 (warm-up and timed)");
  EXPECT_NE(errorOf([] { cli::dataParallelRow("{\"model\": \"small\"}", 0, 1); }).find("fusec run's report: "),
            std::string::npos);
  EXPECT_NE(errorOf([] { cli::dataParallelRow("not json", 0, 1); }).find("fusec run's report is not JSON"), std::string::npos);
}

bench::BenchRow stepRow(const std::string& impl, int gpus, double medianMs) {
  bench::BenchRow r;
  r.model = "small", r.ctx = 256, r.batch = 64, r.dtype = "bf16", r.pass = "step", r.impl = impl, r.gpus = gpus;
  r.iters = 3;
  r.ms = bench::summarize({medianMs, medianMs, medianMs});
  return r;
}

TEST(BenchGpus, ScalingEfficiencyIsTheOneGpuMedianOverTheRows) {
  std::vector<bench::BenchRow> rows = {stepRow("compiled", 1, 27), stepRow("compiled", 2, 30), stepRow("compiled", 4, 36),
                                       stepRow("torch.compile+DDP", 2, 90)};
  rows[3].scalingEfficiency = 0.33;  // the DDP script's own, kept
  bench::fillScalingEfficiency(rows);
  EXPECT_FALSE(rows[0].scalingEfficiency);
  EXPECT_DOUBLE_EQ(*rows[1].scalingEfficiency, 0.9);
  EXPECT_DOUBLE_EQ(*rows[2].scalingEfficiency, 0.75);
  EXPECT_DOUBLE_EQ(*rows[3].scalingEfficiency, 0.33);
  // The table shows the data-parallel columns only when a row has several GPUs.
  const std::string table = bench::formatRows(rows, bench::Format::Table);
  EXPECT_NE(table.find("scaling %"), std::string::npos);
  EXPECT_NE(table.find("90.0"), std::string::npos);
  const std::string single = bench::formatRows({rows[0]}, bench::Format::Table);
  EXPECT_EQ(single.find("scaling %"), std::string::npos);
  // JSON round trip, and a row without the data-parallel keys (the single-GPU scripts') parses.
  const std::string json = bench::formatRows({rows[2]}, bench::Format::Json);
  const bench::BenchRow back = bench::parseJsonRow(json.substr(0, json.find('\n')));
  EXPECT_EQ(back.gpus, 4);
  EXPECT_DOUBLE_EQ(*back.scalingEfficiency, 0.75);
  nlohmann::json j = nlohmann::json::parse(json.substr(0, json.find('\n')));
  j.erase("gpus"), j.erase("scaling_efficiency"), j.erase("exposed_comm_ms");
  const bench::BenchRow old = bench::parseJsonRow(j.dump());
  EXPECT_EQ(old.gpus, 1);
  EXPECT_FALSE(old.scalingEfficiency);
}

}  // namespace
}  // namespace fusec
