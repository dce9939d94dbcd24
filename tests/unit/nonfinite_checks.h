// The finite-value contract of `fusec run`, as checks shared by the CPU test (the
// interpreter, tests/unit/nonfinite_test.cpp) and the GPU test (tests/gpu/run_test.cpp):
//   - weights holding NaN or Inf are refused at load with one line naming the tensor, unless
//     --allow-nonfinite;
//   - the first non-finite loss stops a run with one line (the step, the loss); --out holds
//     the losses of the good steps and the weights of the last good one, bit for bit.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "frontend/safetensors.h"
#include "test_util.h"

namespace fusec::test {

inline std::string fusecRun(const std::string& args) {
  return fusecBinary() + " run " + args + " 2>&1";
}

// fusecRun with its own kernel and GEMM-tuning cache in `dir`: runs compared bit for bit must
// use the same GEMM algorithms, and tests running at once (ctest -j) that tune the same
// shapes would otherwise replace each other's choices between two runs of one test.
inline std::string fusecRunIn(const std::string& dir, const std::string& args) {
  return "XDG_CACHE_HOME=" + dir + "/cache " + fusecRun(args);
}

inline int countLines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

// `dir` exists; `device` is "cpu" or "cuda"; `model` a small zoo model.
inline void checkNonFiniteWeightsAreRefused(const std::string& dir, const std::string& device) {
  const std::string w = dir + "/w.safetensors", bad = dir + "/bad.safetensors";
  ASSERT_EQ(runCommand(fusecRun("--init-weights " + w + " --model tiny")).second, 0);
  SafetensorsMetadata meta;
  Bindings t = loadSafetensors(w, &meta);
  ASSERT_TRUE(t.count("layers.0.ffn.w1.weight"));
  t["layers.0.ffn.w1.weight"].f[7] = std::nanf("");
  saveSafetensors(bad, t, meta);
  const std::string common = " --model tiny --program train_step --random-inputs --batch 2 --ctx 16 --device " + device;
  auto [out, rc] = runCommand(fusecRun("--weights " + bad + common));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_EQ(out, "error: " + bad + ": tensor 'layers.0.ffn.w1.weight' holds nan at index 7 (of " +
                     std::to_string(t["layers.0.ffn.w1.weight"].f.size()) +
                     " values; --allow-nonfinite loads it anyway)\n");
  // Allowed, the NaN reaches the loss; the run goes on (each step updates nothing).
  auto [out2, rc2] = runCommand(fusecRun("--weights " + bad + common + " --steps 2 --allow-nonfinite"));
  EXPECT_EQ(rc2, 0) << out2;
  EXPECT_NE(out2.find("step 2/2  loss nan"), std::string::npos) << out2;
}

inline void checkRunStopsAtTheFirstNonFiniteLoss(const std::string& dir, const std::string& device) {
  // lr 1e10 blows tiny up: step 1's loss is finite, step 2's is not.
  const std::string common = " --model tiny --program train_step --random-inputs --batch 2 --ctx 16 --lr 1e10 --device " +
                             device;
  const std::string one = dir + "/one.safetensors", many = dir + "/many.safetensors";
  ASSERT_EQ(runCommand(fusecRunIn(dir, common + " --steps 1 --out " + one)).second, 0);
  auto [out, rc] = runCommand(fusecRunIn(dir, common + " --steps 6 --out " + many));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_EQ(countLines(out), 2) << out;  // step 1's loss, and the error
  EXPECT_NE(out.find("error: run: step 2 of 6: the loss is nan; stopped with the weights of step 1 (written to " +
                     many + ")\n"),
            std::string::npos)
      << out;
  // --out: the good step's loss, and its weights exactly (the bad step updated nothing).
  Bindings a = loadSafetensors(one), b = loadSafetensors(many);
  ASSERT_EQ(b.at("loss").type.shape, (Shape{1}));
  EXPECT_EQ(b.at("loss").f, a.at("loss").f);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_EQ(t.f, b.at(name).f) << name;
}

}  // namespace fusec::test
