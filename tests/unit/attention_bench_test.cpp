// fusec bench attention's CPU side: the sweep with stand-in runners (row order, OOM rows that
// do not stop it, progress), the three formats, and the --vs-torch contract with
// bench/torch_sdpa_ref.py (its rows parse back, merge after their shape, sum fwd + bwd).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "bench/attention_bench.h"
#include "test_util.h"

namespace fusec {
namespace {

// A stand-in: random non-zero times; eager runs out of memory from seq 4096, as naive
// attention does on the device; the compiled side fails with another error at d 128.
std::map<std::string, bench::AttentionRunner> standIns(std::mt19937& rng) {
  auto times = [&rng](int n) {
    std::uniform_real_distribution<double> u(0.1, 3.0);
    std::vector<double> v;
    for (int i = 0; i < n; ++i) v.push_back(u(rng));
    return v;
  };
  return {{"eager",
           [times](const bench::AttentionCase& c) {
             if (c.seq >= 4096) throw Error("libtorch (attention): CUDA out of memory. Tried to allocate 8.00 GiB");
             bench::AttentionRun r{times(c.iters), times(c.iters), c.batch * c.seq * c.seq * 4, 3 * c.batch * c.seq * c.seq * 4};
             return r;
           }},
          {"compiled", [times](const bench::AttentionCase& c) {
             if (c.d == 128) throw Error("kernel launch failed");
             return bench::AttentionRun{times(c.iters), times(c.iters), 1 << 20, 2 << 20};
           }}};
}

TEST(AttentionBench, SweepRowsAndOom) {
  std::mt19937 rng(3);
  bench::AttentionSweep s;
  s.batch = 2, s.ds = {16, 128}, s.seqs = {256, 4096}, s.iters = 4;
  std::ostringstream progress;
  auto rows = bench::runAttentionSweep(s, standIns(rng), &progress);
  ASSERT_EQ(rows.size(), 8u);
  EXPECT_EQ(rows[0].impl, "eager");
  EXPECT_EQ(rows[1].impl, "compiled");
  EXPECT_EQ(rows[0].status, "OK");
  EXPECT_EQ(rows[2].seq, 4096);
  EXPECT_EQ(rows[2].status, "OOM");
  EXPECT_FALSE(rows[2].forwardMs.has_value());
  EXPECT_EQ(rows[3].status, "OK");  // the sweep went on after eager's OOM
  EXPECT_EQ(rows[5].status, "kernel launch failed");
  EXPECT_EQ(rows[0].forwardMs->n, 4);
  EXPECT_EQ(*rows[0].savedBytes, 2 * 256 * 256 * 4);
  EXPECT_NE(progress.str().find("[3/8] attention: batch=2 d=16 seq=4096 fp32 eager: OOM ("), std::string::npos)
      << progress.str();

  s.impls = {"flash"};
  test::expectError([&] { bench::runAttentionSweep(s, standIns(rng), nullptr); }, "no attention runner 'flash'");
}

TEST(AttentionBench, Formats) {
  std::mt19937 rng(5);
  bench::AttentionSweep s;
  s.batch = 2, s.ds = {32}, s.seqs = {256, 8192}, s.iters = 3;
  auto rows = bench::runAttentionSweep(s, standIns(rng), nullptr);
  const std::string table = bench::formatAttentionRows(rows, bench::Format::Table);
  for (const char* part : {"| batch | d  | seq  | dtype | impl", "| OOM ", "S and P from q and k", "0.5 MiB", "fwd+bwd TFLOP/s"})
    EXPECT_NE(table.find(part), std::string::npos) << part << "\n" << table;

  std::istringstream json(bench::formatAttentionRows(rows, bench::Format::Json));
  std::string line;
  int n = 0;
  while (std::getline(json, line)) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j.size(), 15u);
    // FlashAttention's count: 4 B N^2 d / 2 FLOPs over the median forward time.
    if (j["status"] == "OK") {
      EXPECT_NEAR(j["forward_tflops"].get<double>(),
                  4.0 * 2 * double(j["seq"]) * double(j["seq"]) * 32 / 2 / (j["forward_ms"].get<double>() * 1e-3) / 1e12,
                  1e-9);
    }
    EXPECT_EQ(j["status"] == "OK", !j["forward_ms"].is_null());
    ++n;
  }
  EXPECT_EQ(n, 4);

  const std::string csv = bench::formatAttentionRows(rows, bench::Format::Csv);
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "batch,d,seq,dtype,impl,status,forward_ms,forward_std_ms,backward_ms,backward_std_ms,fwd_bwd_ms,forward_tflops,"
            "fwd_bwd_tflops,saved_for_backward_bytes,peak_bytes");
  EXPECT_NE(csv.find("\n2,32,8192,fp32,eager,OOM,,,,,,,,,\n"), std::string::npos) << csv;
}


// A JSON row survives formatting and parsing; an SDPA row's fwd+bwd is forward + backward
// (autograd's backward alone), a fused row's is its backward program (which runs its forward).
TEST(AttentionBench, JsonRowsParseBack) {
  bench::AttentionRow r;
  r.batch = 8, r.d = 64, r.seq = 16384, r.dtype = "bf16", r.impl = "sdpa-flash";
  r.forwardMs = bench::summarize({2.0, 2.5, 3.0});
  r.backwardMs = bench::summarize({5.0, 6.0, 7.0});
  r.savedBytes = 4 << 20, r.peakBytes = 64 << 20;
  const std::string line = bench::formatAttentionRows({r}, bench::Format::Json);
  const bench::AttentionRow back = bench::parseAttentionJsonRow(line.substr(0, line.size() - 1));
  EXPECT_EQ(back.impl, "sdpa-flash");
  EXPECT_EQ(back.seq, 16384);
  ASSERT_TRUE(back.forwardMs && back.backwardMs);
  EXPECT_DOUBLE_EQ(back.forwardMs->median, 2.5);
  EXPECT_DOUBLE_EQ(back.backwardMs->std, r.backwardMs->std);
  EXPECT_EQ(back.savedBytes, int64_t(4 << 20));
  auto j = nlohmann::json::parse(bench::formatAttentionRows({back}, bench::Format::Json));
  EXPECT_DOUBLE_EQ(j["fwd_bwd_ms"].get<double>(), 8.5);
  bench::AttentionRow fused = back;
  fused.impl = "fused";
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(bench::formatAttentionRows({fused}, bench::Format::Json))["fwd_bwd_ms"].get<double>(),
                   6.0);

  auto j2 = nlohmann::json::parse(line);
  j2.erase("peak_bytes");
  EXPECT_THROW(
      {
        try {
          bench::parseAttentionJsonRow(j2.dump());
        } catch (const Error& e) {
          EXPECT_STREQ(e.what(), "attention row lacks \"peak_bytes\"");
          throw;
        }
      },
      Error);
  auto j3 = nlohmann::json::parse(line);
  j3["forward_ms"] = "fast";
  EXPECT_THROW(bench::parseAttentionJsonRow(j3.dump()), Error);
  EXPECT_THROW(bench::parseAttentionJsonRow("{not json"), Error);
}

TEST(AttentionBench, MergeAfterTheirShape) {
  auto row = [](const char* dtype, int64_t seq, const char* impl) {
    bench::AttentionRow r;
    r.dtype = dtype, r.d = 64, r.seq = seq, r.impl = impl;
    return r;
  };
  std::vector<bench::AttentionRow> rows = {row("fp32", 256, "compiled"), row("fp32", 256, "fused"),
                                           row("fp32", 1024, "compiled"), row("fp32", 1024, "fused")};
  bench::mergeAttentionRows(rows, {row("fp32", 256, "sdpa-flash"), row("fp32", 256, "sdpa-efficient"),
                                   row("fp32", 1024, "sdpa-flash"), row("bf16", 256, "sdpa-flash")});
  std::vector<std::string> order;
  for (const auto& r : rows) order.push_back(r.dtype + " " + std::to_string(r.seq) + " " + r.impl);
  EXPECT_EQ(order, (std::vector<std::string>{"fp32 256 compiled", "fp32 256 fused", "fp32 256 sdpa-flash",
                                             "fp32 256 sdpa-efficient", "fp32 1024 compiled", "fp32 1024 fused",
                                             "fp32 1024 sdpa-flash", "bf16 256 sdpa-flash"}));
}

// bench/torch_sdpa_ref.py keeps the row contract: its --dry-run rows (no torch, no GPU) have
// fusec's keys in fusec's order, on the grid's nesting; bad flags are one line and exit 1.
TEST(AttentionBench, SdpaScriptRowsMatchTheContract) {
  const std::string script = std::string(FUSEC_SOURCE_DIR) + "/bench/torch_sdpa_ref.py";
  auto run = [](const std::string& cmd) { return test::runCommand(cmd + " 2>&1"); };
  auto [out, rc] = run("python3 " + script + " --dry-run --batch 8 --d 64,128 --seq 1024,16384 --dtype fp32,bf16");
  ASSERT_EQ(rc, 0) << out;
  std::istringstream lines(out);
  std::string line;
  std::vector<bench::AttentionRow> rows;
  while (std::getline(lines, line)) {
    rows.push_back(bench::parseAttentionJsonRow(line));
    EXPECT_EQ(rows.back().status, "dry-run");
    std::vector<std::string> keys, want;
    const auto got = nlohmann::ordered_json::parse(line);  // items() refers into it
    const auto ours = nlohmann::ordered_json::parse(bench::formatAttentionRows({rows.back()}, bench::Format::Json));
    for (auto it = got.begin(); it != got.end(); ++it) keys.push_back(it.key());
    for (auto it = ours.begin(); it != ours.end(); ++it) want.push_back(it.key());
    EXPECT_EQ(keys, want);
  }
  ASSERT_EQ(rows.size(), 2u * 2 * 2 * 3);
  EXPECT_EQ(rows.front().dtype, "fp32");
  EXPECT_EQ(rows.front().impl, "sdpa-flash");
  EXPECT_EQ(rows[3].seq, 16384);
  EXPECT_EQ(rows.back().dtype, "bf16");
  auto [bad, badRc] = run("python3 " + script + " --impl sdpa-math");
  EXPECT_EQ(bad, "error: --impl: unknown 'sdpa-math' (known: sdpa-flash, sdpa-cudnn, sdpa-efficient)\n");
  EXPECT_EQ(badRc, 1);
  auto [neg, negRc] = run("python3 " + script + " --seq 0");
  EXPECT_EQ(negRc, 1) << neg;
}

}  // namespace
}  // namespace fusec
