// `fusec run --checkpoint/--resume` on the CPU interpreter (resume_checks.h), and the
// checkpoint file's own checks.
#include "resume_checks.h"

#include "frontend/models/zoo_model.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <sstream>

namespace fusec::test {
namespace {

TEST(Resume, AResumedRunEqualsTheRunNeverStopped) {
  ScratchDir d("fusec_resume");
  checkResumedRunMatchesUninterrupted(d.path, "cpu");
}

TEST(Resume, AKilledRunResumesFromItsLastCheckpoint) {
  ScratchDir d("fusec_resume_killed");
  checkKilledRunResumes(d.path, "cpu");
}

TrainingCheckpoint sample() {
  TrainingCheckpoint c;
  c.step = 2;
  c.losses = {3.5f, 3.25f};
  c.state["w"] = HostTensor::zeros(Type{DType::f32, {2}});
  c.state["w"].f = {1.5f, -2.0f};
  c.run = {{"--dtype", "bf16"}, {"--seed", "0"}};
  c.dataState = "1 2 3";
  return c;
}

TEST(TrainingCheckpoint, RoundTrips) {
  ScratchDir d("fusec_checkpoint_roundtrip");
  const std::string dir = d.path + "/new/dir";  // created
  saveCheckpoint(dir, sample());
  const TrainingCheckpoint c = loadCheckpoint(dir);
  EXPECT_EQ(c.step, 2);
  EXPECT_EQ(c.losses, sample().losses);
  ASSERT_EQ(c.state.size(), 1u);
  EXPECT_EQ(c.state.at("w").f, sample().state.at("w").f);
  EXPECT_EQ(c.run, sample().run);
  EXPECT_EQ(c.dataState, "1 2 3");
}

TEST(TrainingCheckpoint, TemporariesOfDeadWritersAreRemoved) {
  ScratchDir d("fusec_checkpoint_stale");
  // A pid above any pid_max (2^22) is no running process; our own is a live writer.
  const std::string dead = d.path + "/.checkpoint.safetensors.tmp.999999999.0";
  const std::string live = d.path + "/.checkpoint.safetensors.tmp." + std::to_string(::getpid()) + ".7";
  const std::string other = d.path + "/.weights.safetensors.tmp.999999999.0";  // not a checkpoint's
  for (const std::string& f : {dead, live, other}) std::ofstream(f) << "partial";
  saveCheckpoint(d.path, sample());
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(live));
  EXPECT_TRUE(std::filesystem::exists(other));
  EXPECT_EQ(loadCheckpoint(d.path).step, 2);
}

TEST(TrainingCheckpoint, RefusesAnotherRunWithOneLine) {
  const TrainingCheckpoint c = sample();
  EXPECT_EQ(errorOf([&] { requireSameRun(c, {{"--dtype", "bf16"}, {"--seed", "0"}}, "D"); }), "<no error>");
  EXPECT_EQ(errorOf([&] { requireSameRun(c, {{"--dtype", "fp32"}, {"--seed", "0"}}, "D"); }),
            "--resume D: the checkpoint's run had --dtype bf16, this run has --dtype fp32 (a resumed run takes the "
            "flags of the run it continues)");
  EXPECT_EQ(errorOf([&] { requireSameRun(c, {{"--dtype", "bf16"}, {"--seed", "0"}, {"--tf32", "on"}}, "D"); }),
            "--resume D: the checkpoint's run had no --tf32, this run has --tf32 on (a resumed run takes the flags "
            "of the run it continues)");
  EXPECT_EQ(errorOf([&] { requireSameRun(c, {{"--dtype", "bf16"}}, "D"); }),
            "--resume D: the checkpoint's run had --seed 0, which this run lacks");
}

TEST(TrainingCheckpoint, MissingCorruptOrForeignFilesAreOneLine) {
  ScratchDir d("fusec_checkpoint_bad");
  EXPECT_EQ(errorOf([&] { loadCheckpoint(d.path + "/none"); }),
            "--resume " + d.path + "/none: no checkpoint there (" + d.path + "/none/checkpoint.safetensors does not exist)");
  saveCheckpoint(d.path, sample());
  const std::string file = checkpointPath(d.path);
  // Truncated: the safetensors reader's one line, naming the file.
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 3);
  const std::string truncated = errorOf([&] { loadCheckpoint(d.path); });
  EXPECT_EQ(truncated.find(file), 0u) << truncated;
  EXPECT_EQ(truncated.find('\n'), std::string::npos) << truncated;
  // A weights file is not a checkpoint.
  saveSafetensors(file, sample().state);
  EXPECT_EQ(errorOf([&] { loadCheckpoint(d.path); }),
            file + ": not a fusec training checkpoint (no 'fusec_checkpoint' metadata)");
  // A loss count that disagrees with the step.
  Bindings t = sample().state;
  t["loss"] = HostTensor::zeros(Type{DType::f32, {3}});
  saveSafetensors(file, t, {{"fusec_checkpoint", "2"}, {"fusec_step", "2"}});
  EXPECT_EQ(errorOf([&] { loadCheckpoint(d.path); }),
            file + ": not a fusec training checkpoint ('loss' is f32[3] at step 2, expected f32[2])");
  saveSafetensors(file, t, {{"fusec_checkpoint", "2"}, {"fusec_step", "-4"}});
  EXPECT_EQ(errorOf([&] { loadCheckpoint(d.path); }), file + ": not a fusec training checkpoint (step count '-4')");
  saveSafetensors(file, t, {{"fusec_checkpoint", "1"}, {"fusec_step", "3"}});
  EXPECT_EQ(errorOf([&] { loadCheckpoint(d.path); }), file + ": a checkpoint of format 1, this fusec reads format 2");
  // Whole but without its checksum.
  t["loss"] = HostTensor::zeros(Type{DType::f32, {2}});
  saveSafetensors(file, t, {{"fusec_checkpoint", "2"}, {"fusec_step", "2"}});
  EXPECT_EQ(errorOf([&] { loadCheckpoint(d.path); }), file + ": not a fusec training checkpoint (no checksum)");
}

// A data position no sampler wrote (all-zero state words, which would draw zeros for ever, or
// the wrong count) is refused in one line, even with a checksum that matches it.
TEST(Resume, ADataPositionThatIsNoSamplerStateIsRefused) {
  ScratchDir d("fusec_resume_rng");
  const std::string tokens = d.path + "/tokens.u16";
  writeTinyTokens(tokens, 5000);
  const std::string common = " --model tiny --program train_step --data " + tokens + " --batch 2 --ctx 8 --device cpu";
  const std::string ck = d.path + "/ck";
  auto [o1, rc1] = runCommand(fusecRunIn(d.path, common + " --steps 1 --checkpoint " + ck));
  ASSERT_EQ(rc1, 0) << o1;
  std::string zeros;
  for (int k = 0; k < 312; ++k) zeros += "0 ";
  for (const std::string& state : {zeros + "312", std::string("1 2 3")}) {
    TrainingCheckpoint c = loadCheckpoint(ck);
    c.dataState = state;
    saveCheckpoint(ck, std::move(c));  // a fresh checksum: only the state itself is wrong
    auto [o2, rc2] = runCommand(fusecRunIn(d.path, common + " --steps 2 --resume " + ck));
    EXPECT_NE(rc2, 0) << o2;
    EXPECT_NE(o2.find("no readable --data position in the checkpoint"), std::string::npos) << o2;
  }
}

// One run a checkpoint directory: a second one is refused while the first holds it.
TEST(TrainingCheckpoint, ADirectoryIsOneRunsAtATime) {
  ScratchDir d("fusec_checkpoint_lock");
  std::optional<CheckpointDirLock> first;
  first.emplace(d.path);
  EXPECT_EQ(errorOf([&] { CheckpointDirLock second(d.path); }),
            "--checkpoint " + d.path + ": another fusec run is writing checkpoints there");
  first.reset();
  EXPECT_NO_THROW(CheckpointDirLock again(d.path));
}

// Any single damaged byte is refused in one line, or (where the format cannot see it, such as
// a space in the header's JSON) the checkpoint still reads back exactly as written.
// Issue 39's bar: 10,000 random byte flips of a checkpoint of tiny's whole training state
// (weights and both AdamW moments, a sampler state, a run identity): each is refused with one
// line, or reads back to exactly what was written (a resume from it continues the same run).
// In memory (parseCheckpoint runs loadCheckpoint's checks), so that 10,000 tries take seconds.
TEST(TrainingCheckpoint, TenThousandByteFlipsAreRefusedOrHarmless) {
  ScratchDir d("fusec_checkpoint_flips");
  TrainingCheckpoint written = sample();
  const auto tiny = models::transformerModel(models::namedConfig("tiny"));
  for (auto& [name, t] : tiny->initialWeights(3)) {
    HostTensor m = t;
    for (float& x : m.f) x *= 1e-3f;
    written.state[name + ".exp_avg"] = m;
    for (float& x : m.f) x = x * x;
    written.state[name + ".exp_avg_sq"] = std::move(m);
    written.state[name] = std::move(t);
  }
  std::mt19937_64 sampler(9);
  std::ostringstream samplerState;
  samplerState << sampler;
  written.dataState = samplerState.str();
  saveCheckpoint(d.path, written);
  const std::string file = checkpointPath(d.path);
  const TrainingCheckpoint good = loadCheckpoint(d.path);
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_GT(bytes.size(), size_t(100000)) << "a model's state, not a toy";
  // Half the flips in the header (its JSON: names, shapes, offsets, metadata), half anywhere.
  uint64_t headerEnd = 8;
  for (int i = 0; i < 8; ++i) headerEnd += uint64_t(uint8_t(bytes[size_t(i)])) << (8 * i);
  std::mt19937 rng(11);
  int refused = 0, harmless = 0;
  for (int k = 0; k < 10000; ++k) {
    std::string damaged = bytes;
    const size_t at = k % 2 ? rng() % headerEnd : rng() % damaged.size();
    damaged[at] = char(uint8_t(damaged[at]) ^ uint8_t(1 + rng() % 255));
    try {
      const TrainingCheckpoint c = parseCheckpoint(damaged, file);
      ++harmless;
      ASSERT_EQ(c.step, good.step) << "byte " << at;
      ASSERT_EQ(c.losses, good.losses) << "byte " << at;
      ASSERT_EQ(c.dataState, good.dataState) << "byte " << at;
      ASSERT_EQ(c.run, good.run) << "byte " << at;
      ASSERT_EQ(c.state.size(), good.state.size()) << "byte " << at;
      for (const auto& [name, t] : good.state) {
        ASSERT_TRUE(c.state.count(name)) << name << " byte " << at;
        ASSERT_EQ(c.state.at(name).type, t.type) << name << " byte " << at;
        ASSERT_EQ(c.state.at(name).f, t.f) << name << " byte " << at;
      }
    } catch (const Error& e) {
      ++refused;
      ASSERT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(refused + harmless, 10000);
  EXPECT_GT(refused, 9900) << "the checksum sees the data and the header";
  // loadCheckpoint reads the file through the same checks: one flip on disk is refused.
  bytes[bytes.size() - 1] = char(bytes.back() ^ 0x5a);
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
  }
  test::expectError([&] { loadCheckpoint(d.path); }, "damaged: its checksum does not match");
}

}  // namespace
}  // namespace fusec::test
