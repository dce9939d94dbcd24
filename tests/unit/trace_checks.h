// The schema of `fusec profile --trace` (bench/trace.h), as a check shared by the CPU test
// (tests/unit/trace_test.cpp, on planned tiny programs with random launch times) and the GPU
// test (tests/gpu/profile_test.cpp, on a real profile).
#pragma once
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace fusec::test {

// `programs`: each profiled program's name and launch count, in order.
inline void checkChromeTrace(const nlohmann::json& j, const std::vector<std::pair<std::string, size_t>>& programs) {
  ASSERT_TRUE(j.is_object());
  ASSERT_TRUE(j.contains("traceEvents") && j["traceEvents"].is_array());
  size_t launches = 0, host = 0, passes = 0;
  std::vector<std::string> programSlices, graphSlices;
  std::vector<size_t> counted;  // launch slices before each program slice
  double lastEnd = -1;
  for (const auto& e : j["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("name") && e.contains("pid")) << e.dump();
    if (e["ph"] == "M") continue;
    ASSERT_EQ(e["ph"], "X") << e.dump();
    ASSERT_TRUE(e["ts"].is_number() && e["dur"].is_number() && e.contains("tid")) << e.dump();
    EXPECT_GE(e["dur"].get<double>(), 0) << e.dump();
    const int pid = e["pid"], tid = e["tid"];
    if (pid == 1) {
      ++host;
      passes += e["name"].get<std::string>().rfind("pass ", 0) == 0;
    } else if (pid == 2 && tid == 2) {
      ++launches;
      const auto& a = e["args"];
      for (const char* k : {"kernel", "family", "category", "layer", "phase", "bytes", "GB/s", "flops"})
        EXPECT_TRUE(a.contains(k)) << k << " in " << e.dump();
      EXPECT_TRUE(a["phase"] == "forward" || a["phase"] == "backward" || a["phase"] == "optimizer") << e.dump();
      EXPECT_EQ(a["phase"] == "optimizer", a["category"] == "optimizer") << e.dump();
      // A launch of a step-invariant value runs at the first call only: no bytes a step.
      const std::string group = a["group"];
      const bool once = group.size() > 7 && group.compare(group.size() - 7, 7, " (once)") == 0;
      if (once) EXPECT_EQ(a["bytes"].get<int64_t>(), 0) << e.dump();
      else EXPECT_GT(a["bytes"].get<int64_t>(), 0) << e.dump();
      if (a["family"] == "gemm") {
        EXPECT_GT(a["flops"].get<int64_t>(), 0) << e.dump();
      }
      // One launch after another, none overlapping.
      EXPECT_GE(e["ts"].get<double>() + 1e-6, lastEnd) << e.dump();
      lastEnd = e["ts"].get<double>() + e["dur"].get<double>();
    } else if (pid == 2 && tid == 1) {
      programSlices.push_back(e["name"]);
      EXPECT_EQ(e["args"]["launches"].get<size_t>(), launches) << "a program slice closes its launches";
      counted.push_back(launches);
      launches = 0;
    } else if (pid == 2 && tid == 3) {
      graphSlices.push_back(e["name"]);
    } else {
      ADD_FAILURE() << "an event on no known track: " << e.dump();
    }
  }
  ASSERT_EQ(programSlices.size(), programs.size());
  for (size_t i = 0; i < programs.size(); ++i) {
    EXPECT_EQ(programSlices[i], programs[i].first);
    EXPECT_EQ(counted[i], programs[i].second) << programs[i].first << ": one slice per launch";
    EXPECT_EQ(graphSlices.at(i), programs[i].first + " (CUDA graph)");
  }
  EXPECT_GT(host, 0u);
  EXPECT_GT(passes, 0u);
}

}  // namespace fusec::test
