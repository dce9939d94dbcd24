// Resumable training runs (`fusec run --checkpoint DIR --checkpoint-every K`, `--resume DIR`),
// as checks shared by the CPU test (the interpreter, tests/unit/resume_test.cpp) and the GPU
// test (tests/gpu/run_test.cpp): a run stopped and resumed gives the losses and the weights
// of the run never stopped, bit for bit.
#pragma once
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include "frontend/safetensors.h"
#include "frontend/training_checkpoint.h"
#include "nonfinite_checks.h"
#include "test_util.h"

namespace fusec::test {

// A flat uint16 token file of `count` random ids of tiny's vocabulary (37), for --data.
inline void writeTinyTokens(const std::string& path, size_t count) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> id(0, 36);
  std::ofstream f(path, std::ios::binary);
  for (size_t k = 0; k < count; ++k) {
    const uint16_t t = uint16_t(id(rng));
    f.write(reinterpret_cast<const char*>(&t), sizeof t);
  }
}

// Every tensor of `a` equals `b`'s, bit for bit (floats compared as their values: no NaN
// is expected in a good run).
inline void expectSameTensors(const Bindings& a, const Bindings& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << what << ": " << name;
    EXPECT_EQ(t.type, b.at(name).type) << what << ": " << name;
    EXPECT_EQ(t.f, b.at(name).f) << what << ": " << name;
  }
}

// Stopped after a checkpoint, then resumed: a run of tiny over --data (the sampler's state is
// the data position) for 3 steps with a checkpoint every 2 (at 2, and after the last), then
// resumed up to 7, against 7 steps never stopped. In bf16 on the GPU the steps' GEMMs read
// the bf16 weight copies, which the resume rebuilds from the checkpointed weights.
inline void checkResumedRunMatchesUninterrupted(const std::string& dir, const std::string& device,
                                                const std::string& dtype = "fp32") {
  const std::string tokens = dir + "/tokens.u16";
  writeTinyTokens(tokens, 5000);
  const std::string common = " --model tiny --program train_step --data " + tokens +
                             " --batch 4 --ctx 16 --lr 1e-2 --seed 3 --dtype " + dtype + " --device " + device;
  const std::string whole = dir + "/whole.safetensors", resumedOut = dir + "/resumed.safetensors";
  const std::string ck = dir + "/ck";
  auto [o1, rc1] = runCommand(fusecRunIn(dir, common + " --steps 7 --out " + whole));
  ASSERT_EQ(rc1, 0) << o1;
  auto [o2, rc2] = runCommand(fusecRunIn(dir, common + " --steps 3 --checkpoint " + ck + " --checkpoint-every 2"));
  ASSERT_EQ(rc2, 0) << o2;
  const TrainingCheckpoint c = loadCheckpoint(ck);
  EXPECT_EQ(c.step, 3);
  EXPECT_FALSE(c.dataState.empty());
  const Bindings w = loadSafetensors(whole);
  ASSERT_EQ(w.at("loss").f.size(), 7u);
  EXPECT_EQ(c.losses, std::vector<float>(w.at("loss").f.begin(), w.at("loss").f.begin() + 3));
  auto [o3, rc3] = runCommand(fusecRunIn(dir, common + " --steps 7 --resume " + ck + " --out " + resumedOut));
  ASSERT_EQ(rc3, 0) << o3;
  EXPECT_NE(o3.find("run: resuming " + checkpointPath(ck) + " at step 4 of 7\n"), std::string::npos) << o3;
  EXPECT_EQ(o3.find("step 3/7"), std::string::npos) << o3;  // steps 1-3 are not run again
  EXPECT_NE(o3.find("step 7/7"), std::string::npos) << o3;
  expectSameTensors(w, loadSafetensors(resumedOut), "resumed vs whole");
  // Resuming the finished run runs nothing and writes the same output.
  auto [o4, rc4] = runCommand(fusecRunIn(dir, common + " --steps 3 --resume " + ck + " --out " + dir + "/again.safetensors"));
  ASSERT_EQ(rc4, 0) << o4;
  EXPECT_EQ(loadSafetensors(dir + "/again.safetensors").at("loss").f, c.losses);
}

// Killed (SIGKILL) while training, between or during checkpoint writes, then resumed: the
// checkpoint on disk is whole, and the resumed run equals the run never stopped. Random
// inputs this time (the step's batch depends on the step alone).
inline void checkKilledRunResumes(const std::string& dir, const std::string& device) {
  const std::string common = " --model tiny --program train_step --random-inputs --batch 2 --ctx 16 --seed 5 --device " +
                             device;
  const std::string ck = dir + "/ck", whole = dir + "/whole.safetensors", resumedOut = dir + "/resumed.safetensors";
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string cmd = "env XDG_CACHE_HOME=" + dir + "/cache " + fusecBinary() + " run" + common +
                          " --steps 1000000 --checkpoint " + ck + " --checkpoint-every 4";
  pid_t child = ::fork();
  if (child == 0) {
    ::dup2(fds[1], 1);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  ::close(fds[1]);
  // Killed once it prints step 13's loss: past three checkpoints, while it writes more.
  FILE* out = ::fdopen(fds[0], "r");
  char line[256];
  bool seen = false;
  while (!seen && std::fgets(line, sizeof line, out)) seen = std::string(line).starts_with("step 13/");
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  std::fclose(out);
  ASSERT_TRUE(seen) << "the run never reached step 13";
  ASSERT_TRUE(WIFSIGNALED(status)) << "the run ended before it was killed";
  const TrainingCheckpoint c = loadCheckpoint(ck);  // whole: written atomically
  ASSERT_GE(c.step, 12);
  ASSERT_EQ(c.step % 4, 0);
  // However far the run got before the kill landed, 8 steps past its last checkpoint.
  const std::string steps = std::to_string(c.step + 8);
  auto [o1, rc1] = runCommand(fusecRunIn(dir, common + " --steps " + steps + " --out " + whole));
  ASSERT_EQ(rc1, 0) << o1;
  auto [o2, rc2] = runCommand(fusecRunIn(dir, common + " --steps " + steps + " --resume " + ck + " --out " + resumedOut));
  ASSERT_EQ(rc2, 0) << o2;
  expectSameTensors(loadSafetensors(whole), loadSafetensors(resumedOut), "killed-and-resumed vs whole");
}

}  // namespace fusec::test
