// Data parallel through the CLI on a host with 2 or more GPUs (skipped with the reason
// elsewhere): ZeRO-1 trains as the unsharded job does (it trained to garbage once: an
// all_gather's operand freed while NCCL read it), `bench --gpus` gives rows with scaling
// efficiency and exposed communication, and `profile --gpus` a comm category and the overlap.
#include <nlohmann/json.hpp>

#include <cmath>
#include <sstream>

#include "frontend/safetensors.h"
#include "run_fusec.h"
#include "runtime/device.h"

namespace fusec::test {
namespace {

#define SKIP_WITHOUT_TWO_GPUS()                                                                      \
  do {                                                                                               \
    if (rt::deviceCount() < 2) GTEST_SKIP() << "needs 2 GPUs, this host has " << rt::deviceCount(); \
  } while (0)

double relL2(const HostTensor& a, const HostTensor& b) {
  double num = 0, den = 0;
  for (size_t k = 0; k < a.f.size(); ++k) {
    num += (double(a.f[k]) - b.f[k]) * (double(a.f[k]) - b.f[k]);
    den += double(b.f[k]) * b.f[k];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// In bf16 the sharded job keeps only its rows of the f32 master weights
// (passes/shard_master_weights.cpp) and `--out` gathers them whole again.
TEST(DataParallelOnDevice, ShardedOptimizerTrainsAsTheUnshardedJob) {
  SKIP_WITHOUT_TWO_GPUS();
  for (const char* dtype : {"fp32", "bf16"}) {
    SCOPED_TRACE(dtype);
    ScratchDir d("fusec_gpu_zero1");
    const std::string common = std::string("run --gpus 2 --program train_step --model tiny --vocab 40 --random-inputs ") +
                               "--batch 4 --ctx 16 --steps 8 --seed 5 --dtype " + dtype + " --out ";
    auto [a, rcA] = runFusec(common + d.path + "/plain.safetensors");
    ASSERT_EQ(rcA, 0) << a;
    auto [b, rcB] = runFusec(common + d.path + "/sharded.safetensors --shard-optimizer");
    ASSERT_EQ(rcB, 0) << b;
    const Bindings plain = loadSafetensors(d.path + "/plain.safetensors");
    const Bindings sharded = loadSafetensors(d.path + "/sharded.safetensors");
    // The collectives differ (reduce_scatter against all_reduce), so the sums may round apart;
    // in bf16 the GEMMs carry that on (the bf16 bounds of the other comparisons).
    const double bound = std::string(dtype) == "fp32" ? 1e-5 : 2e-2;
    for (const auto& [name, t] : plain) {
      ASSERT_EQ(sharded.at(name).type, t.type) << name;
      EXPECT_LT(relL2(sharded.at(name), t), bound) << name;
    }
  }
}

std::vector<nlohmann::json> jsonLines(const std::string& text) {
  std::vector<nlohmann::json> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] == '{') rows.push_back(nlohmann::json::parse(line));
  return rows;
}

TEST(DataParallelOnDevice, BenchGivesScalingAndExposedCommunication) {
  SKIP_WITHOUT_TWO_GPUS();
  auto [out, rc] = runFusec("bench --gpus 1,2 --model tiny --batch 4 --ctx 16 --dtype bf16 --warmup 2 --iters 3 "
                            "--format json", false);
  ASSERT_EQ(rc, 0) << out;
  const auto rows = jsonLines(out);
  ASSERT_EQ(rows.size(), 2u) << out;
  EXPECT_EQ(rows[0]["gpus"], 1);
  EXPECT_EQ(rows[1]["gpus"], 2);
  for (const auto& r : rows) EXPECT_EQ(r["status"], "OK") << r.dump();
  EXPECT_GT(rows[1]["scaling_efficiency"].get<double>(), 0);
  EXPECT_GE(rows[1]["exposed_comm_ms"].get<double>(), 0);
  EXPECT_LT(rows[1]["exposed_comm_ms"].get<double>(), rows[1]["median_ms"].get<double>());
}

TEST(DataParallelOnDevice, ProfileShowsTheCollectivesAndTheirOverlap) {
  SKIP_WITHOUT_TWO_GPUS();
  auto [out, rc] = runFusec("profile --gpus 2 --model tiny --batch 4 --ctx 16 --dtype bf16 --iters 2 --format json",
                            false);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  const auto& p = j["programs"].back();
  EXPECT_EQ(p["program"], "train_step");
  bool comm = false;
  for (const auto& c : p["categories"]) comm |= c["name"] == "comm" && c["count"].get<int>() > 0;
  EXPECT_TRUE(comm) << p["categories"].dump();
  EXPECT_EQ(p["overlap"]["ranks"], 2);
  EXPECT_GT(p["overlap"]["comm_ms"].get<double>(), 0);
}

}  // namespace
}  // namespace fusec::test
