// fusec bench's CPU side: statistics, model FLOPs (by hand and against the GEMMs of the
// compiled programs), row formats and the JSON contract with bench/torch_compile_ref.py.
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <sstream>
#include <sys/wait.h>

#include "bench/flops.h"
#include "bench/program.h"
#include "frontend/models/zoo_model.h"
#include "bench/report.h"
#include "bench/stats.h"
#include "bench/sweep.h"
#include "test_util.h"

namespace fusec {
namespace {

using bench::BenchPass;

TEST(BenchStats, Summary) {
  bench::Stats s = bench::summarize({3, 1, 4, 1, 5});
  EXPECT_EQ(s.n, 5);
  EXPECT_DOUBLE_EQ(s.mean, 2.8);
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 5);
  // Squared deviations 0.04 + 3.24 + 1.44 + 3.24 + 4.84 = 12.8, over n - 1 = 4.
  EXPECT_NEAR(s.std, std::sqrt(3.2), 1e-12);
  EXPECT_NEAR(s.cv, std::sqrt(3.2) / 2.8, 1e-12);
  EXPECT_DOUBLE_EQ(bench::summarize({4, 1, 3, 2}).median, 2.5);
  bench::Stats one = bench::summarize({7.5});
  EXPECT_EQ(one.std, 0);
  EXPECT_EQ(one.median, 7.5);
  EXPECT_EQ(test::errorOf([] { bench::summarize({}); }), "statistics of an empty sample");
}

models::ModelConfig tinyConfig() {
  models::ModelConfig c;
  c.name = "hand";
  c.vocab = 16, c.ctx = 16, c.dModel = 8, c.layers = 1, c.heads = 2, c.dFF = 12;
  return c;
}

TEST(BenchFlops, HandCount) {
  // Per token, T = 4: q, k, v, o 4 x 2*8*8 = 512; w1, w3, w2 3 x 2*8*12 = 576;
  // Q K^T and P V 2 x 2*4*8 = 128; lm_head 2*8*16 = 256. Total 1472; backward twice that.
  EXPECT_EQ(bench::modelFlopsPerToken(tinyConfig(), 4, BenchPass::Forward), 1472);
  EXPECT_EQ(bench::modelFlopsPerToken(tinyConfig(), 4, BenchPass::FwdBwd), 3 * 1472);
  EXPECT_EQ(bench::modelFlopsPerToken(tinyConfig(), 4, BenchPass::Step), 3 * 1472);
  EXPECT_EQ(bench::parsePass("fwd_bwd"), BenchPass::FwdBwd);
  EXPECT_EQ(test::errorOf([] { bench::parsePass("bwd"); }), "unknown pass 'bwd' (known: forward, fwd_bwd, step)");
}

// The formula counts exactly the GEMMs the compiler plans, for every pass and both dtypes:
// nothing double-counted by merge-gemms, no GEMM missing from backward.
TEST(BenchFlops, MatchesPlannedGemms) {
  models::ModelConfig c = tinyConfig();
  c.layers = 2;
  const int64_t B = 2, T = 8;
  for (BenchPass pass : {BenchPass::Forward, BenchPass::FwdBwd, BenchPass::Step})
    for (DType dt : {DType::f32, DType::bf16}) {
      Module m;
      Graph& g = bench::buildProgram(m, *models::transformerModel(c), pass, dt, B, T, models::AdamWConfig{});
      EXPECT_EQ(double(bench::gemmFlops(g)), bench::modelFlopsPerToken(c, T, pass) * double(B * T))
          << bench::passName(pass) << " " << dtypeName(dt);
    }
}

TEST(BenchProgram, FwdBwdReturnsLossAndGradients) {
  models::ModelConfig c = tinyConfig();
  Module m;
  Graph& g = bench::buildProgram(m, *models::transformerModel(c), BenchPass::FwdBwd, DType::f32, 2, 4, models::AdamWConfig{});
  ASSERT_EQ(g.outputs.size(), 1 + models::parameterSpecs(c).size());
  EXPECT_EQ(g.outputs[0]->type.rank(), 0);
  for (Op* in : g.inputs()) EXPECT_NE(in->attrStr("name"), "step");  // no optimizer
  Module m2;
  EXPECT_EQ(test::errorOf([&] { bench::buildProgram(m2, *models::transformerModel(c), BenchPass::Forward, DType::f32, 1, 32, {}); }),
            "--ctx 32 exceeds the context length 16 of model 'hand'");
}

bench::BenchRow row(const std::string& impl, double medianMs) {
  bench::BenchRow r;
  r.model = "small", r.ctx = 256, r.batch = 4, r.dtype = "bf16", r.pass = "step", r.impl = impl;
  r.warmup = 5, r.iters = 3;
  r.ms = bench::summarize({medianMs - 1, medianMs, medianMs + 2});
  r.modelFlopsPerToken = 1e9;
  r.peakTflops = 500;
  return r;
}

TEST(BenchReport, DerivedColumns) {
  std::vector<bench::BenchRow> rows = {row("eager", 40), row("compiled", 10), row("compiled", 20)};
  rows[2].warmup = 1;  // no eager row at warm-up 1: no speedup
  rows[0].allocatedBytes = 3 << 20, rows[0].reservedBytes = 5 << 20;
  rows[1].arenaBytes = 1 << 20, rows[1].residentBytes = 2 << 20;
  bench::fillSpeedups(rows);
  EXPECT_DOUBLE_EQ(*rows[0].speedup, 1);
  EXPECT_DOUBLE_EQ(*rows[1].speedup, 4);
  EXPECT_FALSE(rows[2].speedup);
  EXPECT_DOUBLE_EQ(*rows[1].tokensPerSecond(), 1024 / 0.010);
  // 102400 tokens/s x 1e9 FLOPs / 500e12 FLOP/s.
  EXPECT_NEAR(*rows[1].mfu(), 102400.0 * 1e9 / 500e12, 1e-12);
  EXPECT_EQ(*rows[0].peakBytes(), 3 << 20);
  EXPECT_EQ(*rows[1].peakBytes(), 3 << 20);
  EXPECT_EQ(bench::statusFromError("libtorch (train step): CUDA out of memory. Tried to allocate 2.00 GiB"), "OOM");
  EXPECT_EQ(bench::statusFromError("out of GPU memory: needs 90.00 GiB, 70.00 GiB free"), "OOM");
  EXPECT_EQ(bench::statusFromError("kernel k0 failed"), "kernel k0 failed");
}

TEST(BenchReport, JsonRoundTripAndStableKeys) {
  std::vector<bench::BenchRow> rows = {row("eager", 40), row("torch.compile", 12.5)};
  rows[0].reservedBytes = 123456789;
  rows[1].status = "OOM", rows[1].ms.reset();
  bench::fillSpeedups(rows);
  const std::string json = bench::formatRows(rows, bench::Format::Json);
  std::istringstream lines(json);
  std::string line, again;
  std::vector<std::string> keyOrders;
  while (std::getline(lines, line)) {
    again += bench::formatRows({bench::parseJsonRow(line)}, bench::Format::Json);
    keyOrders.push_back(line.substr(0, line.find("\"status\"")));
  }
  EXPECT_EQ(again, json);
  ASSERT_EQ(keyOrders.size(), 2u);
  EXPECT_EQ(json.rfind("{\"model\":\"small\",\"ctx\":256,\"batch\":4,\"dtype\":\"bf16\",\"pass\":\"step\",\"impl\":\"eager\"", 0), 0u);
  EXPECT_NE(json.find("\"status\":\"OOM\",\"mean_ms\":null"), std::string::npos) << json;
  EXPECT_EQ(test::errorOf([] { bench::parseJsonRow("{\"model\": \"x\"}"); }), "bench row lacks \"ctx\"");
  EXPECT_EQ(test::errorOf([] { bench::parseJsonRow("[1]"); }), "bench row is not a JSON object");
}

TEST(BenchReport, CsvAndTable) {
  std::vector<bench::BenchRow> rows = {row("eager", 40), row("compiled", 10)};
  rows[1].status = "bad \"thing\", here", rows[1].ms.reset();
  const std::string csv = bench::formatRows(rows, bench::Format::Csv);
  std::istringstream in(csv);
  std::string header, first, second;
  std::getline(in, header), std::getline(in, first), std::getline(in, second);
  EXPECT_EQ(header.rfind("model,ctx,batch,dtype,pass,impl,warmup,iters,status,mean_ms,", 0), 0u) << header;
  EXPECT_EQ(std::count(header.begin(), header.end(), ','), std::count(first.begin(), first.end(), ','));
  EXPECT_NE(second.find(",\"bad \"\"thing\"\", here\","), std::string::npos) << second;

  const std::string table = bench::formatRows({row("eager", 40), row("compiled", 10)}, bench::Format::Table);
  std::istringstream t(table);
  std::string h, a, b;
  std::getline(t, h), std::getline(t, a), std::getline(t, b);
  EXPECT_EQ(h.rfind("model  ctx  batch  dtype  pass  impl", 0), 0u) << h;
  // Numbers are right-aligned: every line ends at the same column.
  EXPECT_EQ(h.size(), a.size()) << table;
  EXPECT_EQ(a.size(), b.size()) << table;
  EXPECT_NE(a.find("40.000"), std::string::npos) << a;
  EXPECT_EQ(test::errorOf([] { bench::parseFormat("xml"); }), "unknown format 'xml' (known: table, json, csv)");
}

// The keys of a flat JSON object, in order ("key": or "key" : ).
std::vector<std::string> jsonKeys(const std::string& line) {
  static const std::regex key("\"([a-z_]+)\"\\s*:");
  std::vector<std::string> out;
  for (auto it = std::sregex_iterator(line.begin(), line.end(), key); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1]);
  return out;
}

// bench/torch_compile_ref.py keeps the row contract (keys, order) and the FLOP count: its
// --dry-run rows need neither torch nor a GPU.
TEST(BenchTorchRef, RowsMatchTheCppContract) {
  const std::string script = std::string(FUSEC_SOURCE_DIR) + "/bench/torch_compile_ref.py --fusec " FUSEC_BINARY;
  auto run = [](const std::string& cmd) { return test::runCommand(cmd + " 2>&1"); };
  auto [out, rc] = run("python3 " + script + " --dry-run --model all --ctx 128,1024 --passes forward,fwd_bwd,step --dtype bf16 --impl torch.compile");
  ASSERT_EQ(rc, 0) << out;
  std::istringstream lines(out);
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    bench::BenchRow r = bench::parseJsonRow(line);
    ++rows;
    EXPECT_EQ(r.status, "dry-run");
    EXPECT_EQ(r.impl, "torch.compile");
    EXPECT_EQ(r.modelFlopsPerToken, bench::modelFlopsPerToken(models::namedConfig(r.model), r.ctx, bench::parsePass(r.pass)))
        << line;
    // Same keys in the same order as fusec's own rows.
    r.status = "OK";
    r.ms = bench::summarize({1});
    EXPECT_EQ(jsonKeys(bench::formatRows({r}, bench::Format::Json)), jsonKeys(line));
  }
  EXPECT_EQ(rows, 5 * 2 * 3);
  auto [bad, badRc] = run("python3 " + script + " --model nosuch");
  // The sizes, and the error for a model fusec does not know, are fusec's: tiny, which no
  // table in the script names, gets fusec's FLOP count.
  auto [tiny, tinyRc] = run("python3 " + script + " --dry-run --model tiny --ctx 16 --passes step --dtype bf16 --impl eager");
  ASSERT_EQ(tinyRc, 0) << tiny;
  EXPECT_EQ(bench::parseJsonRow(tiny.substr(0, tiny.find('\n'))).modelFlopsPerToken,
            bench::modelFlopsPerToken(models::namedConfig("tiny"), 16, bench::BenchPass::Step));
  EXPECT_EQ(bad, "error: unknown model 'nosuch' (known: small, medium, large, xl, 2.7B, tiny, toy)\n");
  EXPECT_EQ(badRc, 1);
  auto [help, helpRc] = run("python3 " + script + " --help");
  EXPECT_EQ(helpRc, 0);
  EXPECT_NE(help.find("--warmup"), std::string::npos) << help;
  if (run("python3 -c 'import torch'").second != 0) {
    auto [noTorch, noTorchRc] = run("python3 " + script);
    EXPECT_EQ(noTorch, "error: python3 has no torch module\n");
    EXPECT_EQ(noTorchRc, 1);
  }
}

// The FLOPs counted on a traced forward (how an imported model's rows get theirs) equal the
// zoo's closed form, for a zoo model traced through the same path.
TEST(BenchFlops, CountedOnTheForwardEqualsTheFormula) {
  const models::ModelConfig c = models::namedConfig("small");
  const bench::BenchModel traced = bench::importedBenchModel(models::transformerModel(c));
  for (int64_t seq : {16, 256})
    for (BenchPass pass : {BenchPass::Forward, BenchPass::Step})
      EXPECT_DOUBLE_EQ(traced.flopsPerToken(seq, pass), bench::modelFlopsPerToken(c, seq, pass)) << seq;
}

// The sweep with stand-in runners: nesting order, one weight set per shape, OOM and errors
// as rows while the sweep goes on, FLOPs, ceilings and speedups on every row.
TEST(BenchSweep, RowsOomAndProgress) {
  bench::SweepConfig cfg;
  models::ModelConfig c = tinyConfig();
  cfg.models = {bench::zooBenchModel(c)};
  cfg.ctxs = {4, 8, 32};  // 32 exceeds the context: an error row per impl and pass, not an abort
  cfg.dtypes = {"fp32", "bf16"};
  cfg.passes = {BenchPass::Forward, BenchPass::Step};
  cfg.warmups = {0, 2};
  cfg.iters = 3;
  cfg.bf16Tflops = 800, cfg.f32Tflops = 50;
  std::vector<const HostTensor*> weightsSeen;
  std::map<std::string, bench::Runner> runners;
  runners["eager"] = [&](const bench::BenchCase& k, Bindings& env) {
    weightsSeen.push_back(&env.at("lm_head.weight"));
    EXPECT_EQ(env.at("ids").type.str(), "i64[1," + std::to_string(k.seq) + "]");
    bench::TimedRun r;
    r.ms = {4, 5, 6};
    r.allocatedBytes = 100;
    return r;
  };
  runners["compiled"] = [&](const bench::BenchCase& k, Bindings&) -> bench::TimedRun {
    if (k.seq == 8 && k.dtype == DType::bf16 && k.pass == BenchPass::Step)
      throw Error("out of GPU memory: needs 9.00 GiB, 1.00 GiB free");
    bench::TimedRun r;
    r.ms = std::vector<double>(size_t(k.iters), 2.0 + k.warmup);
    r.arenaBytes = 10, r.residentBytes = 20;
    return r;
  };
  cfg.batches = {1};
  std::ostringstream progress;
  std::vector<bench::BenchRow> rows = bench::runSweep(cfg, runners, &progress);
  ASSERT_EQ(rows.size(), 3u * 2 * 2 * 2 * 2);
  EXPECT_EQ(rows[0].impl, "eager");
  EXPECT_EQ(rows[1].impl, "compiled");
  EXPECT_EQ(rows[1].warmup, 0);
  EXPECT_EQ(rows[3].warmup, 2);
  EXPECT_EQ(rows[3].ms->median, 4);
  EXPECT_DOUBLE_EQ(*rows[3].speedup, 5.0 / 4.0);
  int oom = 0, tooLong = 0;
  for (const auto& r : rows) {
    EXPECT_EQ(r.iters, 3);
    EXPECT_EQ(r.peakTflops, r.dtype == "bf16" ? 800 : 50);
    EXPECT_EQ(r.modelFlopsPerToken, bench::modelFlopsPerToken(c, r.ctx, bench::parsePass(r.pass)));
    if (r.status == "OOM") {
      ++oom;
      EXPECT_EQ(r.impl, "compiled");
      EXPECT_FALSE(r.ms);
    }
    if (r.ctx == 32) {
      ++tooLong;
      EXPECT_EQ(r.status, "--ctx 32 exceeds the context length 16");
    }
  }
  EXPECT_EQ(oom, 2);  // two warm-ups
  EXPECT_EQ(tooLong, 16);
  // ctx 4 and 8 each had one weight set, shared by all their eager rows.
  ASSERT_EQ(weightsSeen.size(), 16u);
  EXPECT_EQ(weightsSeen[0], weightsSeen[7]);
  const std::string p = progress.str();
  // A plain line per row off a terminal: the row, its result, the time so far and the ETA.
  EXPECT_NE(p.find("[1/48] bench: hand ctx=4 batch=1 fp32 forward eager warmup=0: median 5.000 ms ("), std::string::npos)
      << p;
  EXPECT_NE(p.find(", ETA "), std::string::npos) << p;
  EXPECT_NE(p.find("bf16 step compiled warmup=2: OOM ("), std::string::npos) << p;
  EXPECT_EQ(p.find('\r'), std::string::npos) << p;
  EXPECT_EQ(test::errorOf([&] {
              cfg.impls = {"torch.compile"};
              bench::runSweep(cfg, runners, nullptr);
            }),
            "internal: no runner for impl 'torch.compile'");
}

}  // namespace
}  // namespace fusec
