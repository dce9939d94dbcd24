// fusec bench attention's CPU side: the sweep with stand-in runners (row order, OOM rows that
// do not stop it, progress) and the three formats.
#include <gtest/gtest.h>

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
  EXPECT_NE(progress.str().find("[3/8] attention batch=2 d=16 seq=4096 fp32 eager: OOM\n"), std::string::npos)
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
    if (j["status"] == "OK")
      EXPECT_NEAR(j["forward_tflops"].get<double>(),
                  4.0 * 2 * double(j["seq"]) * double(j["seq"]) * 32 / 2 / (j["forward_ms"].get<double>() * 1e-3) / 1e12,
                  1e-9);
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

}  // namespace
}  // namespace fusec
