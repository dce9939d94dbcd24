// `fusec run --checkpoint/--resume` on the CPU interpreter (resume_checks.h), and the
// checkpoint file's own checks.
#include "resume_checks.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

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
  saveSafetensors(file, t, {{"fusec_checkpoint", "1"}, {"fusec_step", "2"}});
  EXPECT_EQ(errorOf([&] { loadCheckpoint(d.path); }),
            file + ": not a fusec training checkpoint ('loss' is f32[3] at step 2, expected f32[2])");
  saveSafetensors(file, t, {{"fusec_checkpoint", "1"}, {"fusec_step", "-4"}});
  EXPECT_EQ(errorOf([&] { loadCheckpoint(d.path); }), file + ": not a fusec training checkpoint (step count '-4')");
  saveSafetensors(file, t, {{"fusec_checkpoint", "2"}, {"fusec_step", "3"}});
  EXPECT_EQ(errorOf([&] { loadCheckpoint(d.path); }), file + ": a checkpoint of format 2, this fusec reads format 1");
}

}  // namespace
}  // namespace fusec::test
