// support/progress.h: the progress lines of sweeps and cold compiles, on and off a terminal.
#include "support/progress.h"

#include <gtest/gtest.h>

#include <sstream>

namespace fusec {
namespace {

TEST(Progress, DurationsAsPeopleReadThem) {
  EXPECT_EQ(formatDuration(0), "0 s");
  EXPECT_EQ(formatDuration(12.4), "12 s");
  EXPECT_EQ(formatDuration(185), "3:05");
  EXPECT_EQ(formatDuration(3729), "1:02:09");
  EXPECT_EQ(formatDuration(-3), "0 s");
}

TEST(Progress, LineCarriesTheRateOverWhatIsLeft) {
  EXPECT_EQ(progressLine("bench", 3, 12, "small fp32 step: median 5 ms", 30), "[3/12] bench: small fp32 step: median 5 ms (30 s, ETA 1:30)");
  EXPECT_EQ(progressLine("NVRTC", 12, 12, "", 30), "[12/12] NVRTC (30 s)");
  EXPECT_EQ(progressLine("NVRTC", 0, 12, "", 1), "[0/12] NVRTC (1 s)");
}

TEST(Progress, RowsOffATerminalArePlainLines) {
  std::ostringstream out;
  {
    Progress p(out, "bench", 2, Progress::Style::Rows, false);
    p.begin("a");
    p.step("a: median 1 ms");
    p.begin("b");
    p.step("b: OOM");
  }
  EXPECT_EQ(out.str(), "[1/2] bench: a: median 1 ms (0 s, ETA 0 s)\n[2/2] bench: b: OOM (0 s)\n");
}

TEST(Progress, RowsOnATerminalShowTheRunningRowInPlace) {
  std::ostringstream out;
  {
    Progress p(out, "bench", 2, Progress::Style::Rows, true);
    p.begin("a");
    p.step("a: median 1 ms");
    p.begin("b");
  }  // interrupted while b runs: the line is ended
  EXPECT_EQ(out.str(), "\r\033[K[1/2] bench: a ...\r\033[K[1/2] bench: a: median 1 ms (0 s, ETA 0 s)\n"
                       "\r\033[K[2/2] bench: b ... (ETA 0 s)\n");
}

TEST(Progress, CountsOffATerminalPrintEachTenthOnce) {
  std::ostringstream out;
  {
    Progress p(out, "NVRTC", 25, Progress::Style::Counts, false);
    for (int i = 0; i < 25; ++i) p.step();
  }
  const std::string s = out.str();
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 10) << s;  // 3, 5, 8, 10, ... 25 of 25
  EXPECT_NE(s.find("[3/25] NVRTC ("), std::string::npos) << s;
  EXPECT_NE(s.find("[25/25] NVRTC (0 s)\n"), std::string::npos) << s;
  EXPECT_EQ(s.find('\r'), std::string::npos) << s;
}

TEST(Progress, CountsOnATerminalRewriteOneLine) {
  std::ostringstream out;
  {
    Progress p(out, "NVRTC", 3, Progress::Style::Counts, true);
    for (int i = 0; i < 3; ++i) p.step();
  }
  const std::string s = out.str();
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 1) << s;  // the last
  EXPECT_EQ(std::count(s.begin(), s.end(), '\r'), 3) << s;
}

}  // namespace
}  // namespace fusec
