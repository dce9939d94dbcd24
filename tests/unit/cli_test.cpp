// The fusec binary's contract on bad input: exit code exactly 1 (never a signal) and a
// single line on stderr.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace {

struct Result {
  int status;  // exit code, or 128 + signal
  std::string err, out;
};

Result runFusec(const std::string& args) {
  auto dir = std::filesystem::temp_directory_path();
  std::string errPath = (dir / ("fusec_cli_err_" + std::to_string(::getpid()))).string();
  std::string outPath = (dir / ("fusec_cli_out_" + std::to_string(::getpid()))).string();
  std::string cmd = std::string(FUSEC_BINARY) + " " + args + " >" + outPath + " 2>" + errPath;
  int raw = std::system(cmd.c_str());
  Result r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  auto slurp = [](const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  r.err = slurp(errPath);
  r.out = slurp(outPath);
  std::filesystem::remove(errPath);
  std::filesystem::remove(outPath);
  return r;
}

int lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

TEST(CLI, EveryMalformedFileExitsOneWithOneLine) {
  int n = 0;
  for (auto& e : std::filesystem::directory_iterator(std::string(FUSEC_SOURCE_DIR) + "/tests/lit/errors")) {
    if (e.path().extension() != ".fir") continue;
    Result r = runFusec("opt " + e.path().string());
    // truncated.fir and garbage_bytes.fir make their bad input in their RUN line; as files
    // they are valid.
    if (e.path().filename() == "truncated.fir" || e.path().filename() == "garbage_bytes.fir") continue;
    EXPECT_EQ(r.status, 1) << e.path() << "\n" << r.err;
    EXPECT_EQ(lines(r.err), 1) << e.path() << "\n" << r.err;
    EXPECT_NE(r.err.find("error: "), std::string::npos) << r.err;
    ++n;
  }
  EXPECT_GE(n, 15);
}

TEST(CLI, BadFlagsAndFilesExitOne) {
  for (const char* args : {"opt /nonexistent/file.fir", "opt --no-such-flag x.fir", "", "nosuchcommand",
                           "opt " FUSEC_SOURCE_DIR "/examples/mlp.fir --passes=bogus",
                           "opt " FUSEC_SOURCE_DIR "/examples/mlp.fir --dump-dir=/proc/forbidden"}) {
    Result r = runFusec(args);
    EXPECT_EQ(r.status, 1) << args << "\n" << r.err;
    EXPECT_EQ(lines(r.err), 1) << args << "\n" << r.err;
  }
}

TEST(CLI, HelpAndVersionSucceed) {
  Result v = runFusec("--version");
  EXPECT_EQ(v.status, 0);
  EXPECT_EQ(v.out, "fusec 0.1.0\n");
  Result h = runFusec("opt --help");
  EXPECT_EQ(h.status, 0);
  EXPECT_NE(h.out.find("--passes"), std::string::npos);
}

// fusec starts in milliseconds: it links neither LibTorch (the eager baseline is the
// fusec-eager worker) nor cuBLASLt or NVRTC (opened at first use, codegen/lazy_library.h).
// Linked, they made `fusec --version` take 0.55 s and 405 MB of resident memory.
TEST(CLI, StartsLeanWithoutLibTorchCublasLtOrNvrtc) {
  FILE* p = popen("readelf -d " FUSEC_BINARY " 2>&1", "r");
  ASSERT_NE(p, nullptr);
  std::string dynamic;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) dynamic.append(buf, n);
  ASSERT_EQ(pclose(p), 0) << dynamic;
  ASSERT_NE(dynamic.find("(NEEDED)"), std::string::npos) << dynamic;
  for (const char* lib : {"torch", "c10", "cublas", "nvrtc", "libcuda.so"})
    EXPECT_EQ(dynamic.find(lib), std::string::npos) << "fusec needs " << lib << ":\n" << dynamic;

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    execl(FUSEC_BINARY, FUSEC_BINARY, "--version", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  struct rusage usage {};
  ASSERT_EQ(wait4(child, &status, 0, &usage), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "resident memory under AddressSanitizer is its shadow memory's, not fusec's";
#else
  EXPECT_LE(usage.ru_maxrss, 50 * 1024) << "fusec --version held " << usage.ru_maxrss << " KB";
#endif
}

TEST(CLI, OptWritesOutputFileThatReparsesIdentically) {
  auto out = std::filesystem::temp_directory_path() / ("fusec_opt_" + std::to_string(::getpid()) + ".fir");
  Result r = runFusec("opt " FUSEC_SOURCE_DIR "/examples/mlp.fir -o " + out.string());
  ASSERT_EQ(r.status, 0) << r.err;
  Result again = runFusec("opt " + out.string());
  ASSERT_EQ(again.status, 0) << again.err;
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), again.out);
  std::filesystem::remove(out);
}

}  // namespace
