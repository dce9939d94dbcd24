// The fusec binary's contract on bad input: exit code exactly 1 (never a signal) and a
// single line on stderr.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_util.h"

namespace {

struct Result {
  int status;  // exit code, or 128 + signal
  std::string err, out;
};

Result runFusec(const std::string& args, const std::string& prefix = "") {
  auto dir = std::filesystem::temp_directory_path();
  std::string errPath = (dir / ("fusec_cli_err_" + std::to_string(::getpid()))).string();
  std::string outPath = (dir / ("fusec_cli_out_" + std::to_string(::getpid()))).string();
  std::string cmd = prefix + std::string(FUSEC_BINARY) + " " + args + " >" + outPath + " 2>" + errPath;
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

// The binary the CLI tests run is this build's unless FUSEC_TEST_BINARY names another (GPU
// tests of binaries carried to a machine without the build tree); set but empty is unset.
TEST(CLI, TestsRunTheBinaryTheEnvironmentNames) {
  {
    fusec::test::ScopedEnv other("FUSEC_TEST_BINARY", "/opt/elsewhere/fusec");
    EXPECT_EQ(fusec::test::fusecBinary(), "/opt/elsewhere/fusec");
  }
  {
    fusec::test::ScopedEnv empty("FUSEC_TEST_BINARY", "");
    EXPECT_EQ(fusec::test::fusecBinary(), FUSEC_BINARY);
  }
}

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
  // The names of the libraries it needs, only: the section's addresses hold "c10" too
  // (0x6108c10 failed this test once).
  std::string needed;
  std::istringstream rows(dynamic);
  for (std::string row; std::getline(rows, row);)
    if (row.find("(NEEDED)") != std::string::npos) needed += row.substr(row.find('[')) + "\n";
  for (const char* lib : {"libtorch", "libc10", "libcublas", "libnvrtc", "libcuda.so"})
    EXPECT_EQ(needed.find(lib), std::string::npos) << "fusec needs " << lib << ":\n" << needed;

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


// ---------------------------------------------------------------------------------------
// Reliability (issue 39): inputs that used to hang, crash or pass silently

// A scratch directory, removed with what it holds.
struct Scratch {
  std::filesystem::path dir;
  explicit Scratch(const std::string& name)
      : dir(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~Scratch() { std::filesystem::remove_all(dir); }
  std::string operator/(const std::string& f) const { return (dir / f).string(); }
};

// Every file a command reads may be a named pipe: refused at once (a `timeout` makes a hang a
// failure, not a stuck test), as is a directory given as a program.
TEST(CLI, NamedPipesAndDirectoriesAreRefusedNotWaitedOn) {
  Scratch d("fusec_cli_fifo");
  const std::string fifo = d / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::filesystem::create_directories(d / "ck");
  ASSERT_EQ(::mkfifo((d / "ck/checkpoint.safetensors").c_str(), 0600), 0);
  const std::string pipe = "cannot read '" + fifo + "': not a regular file (a named pipe)";
  struct Case {
    std::string args, want;
  };
  for (const Case& c : {Case{"opt " + fifo, pipe},
                        Case{"opt " + d.dir.string(), "cannot read '" + d.dir.string() + "': not a regular file (a directory)"},
                        Case{"run --program forward --model tiny --weights " + fifo + " --random-inputs --out " + (d / "o"), pipe},
                        Case{"run --program forward --model tiny --inputs " + fifo + " --out " + (d / "o"), pipe},
                        Case{"run --program train_step --model tiny --data " + fifo + " --steps 1 --device cpu", pipe},
                        Case{"run --program train_step --model tiny --random-inputs --steps 2 --device cpu --resume " + (d / "ck"),
                             "not a regular file (a named pipe)"}}) {
    Result r = runFusec(c.args, "timeout 60 ");
    EXPECT_EQ(r.status, 1) << c.args << "\n" << r.err;
    EXPECT_EQ(lines(r.err), 1) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.want), std::string::npos) << c.args << "\n" << r.err;
  }
}

// Model sizes whose element counts overflow int64 (or pass 2^48) are one line, never a crash
// or a silently wrong statistic; so are seeds that are not 64-bit unsigned integers.
TEST(CLI, SizesThatOverflowAndBadSeedsAreOneLine) {
  Scratch d("fusec_cli_sizes");
  for (const std::string& args :
       {"run --init-weights " + (d / "w") + " --model tiny --vocab 4611686018427387904",
        std::string("run --program train_step --model tiny --random-inputs --device cpu --d-ff 2305843009213693952"),
        std::string("compile --model tiny --vocab 9223372036854775807 --stats"),
        std::string("compile --model tiny --layers 100000 --stats"),
        std::string("compile --model tiny --program train_step --batch 4611686018427387904 --ctx 8 --stats"),
        "run --init-weights " + (d / "w") + " --model tiny --seed -1",
        "run --init-weights " + (d / "w") + " --model tiny --seed 18446744073709551616"}) {
    Result r = runFusec(args, "timeout 60 ");
    EXPECT_EQ(r.status, 1) << args << "\n" << r.err;
    EXPECT_EQ(lines(r.err), 1) << args << "\n" << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(d / "w"));
  Result ok = runFusec("run --init-weights " + (d / "w") + " --model tiny --seed 18446744073709551615");
  EXPECT_EQ(ok.status, 0) << ok.err;
}

// Output that cannot be written is a failure: exit 1 with one line, not exit 0.
TEST(CLI, OutputToAFullDiskFails) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this machine";
  for (const char* args : {"opt " FUSEC_SOURCE_DIR "/examples/mlp.fir", "compile --model tiny --stats"}) {
    const std::string cmd = std::string(FUSEC_BINARY) + " " + args + " >/dev/full 2>/dev/null";
    const int raw = std::system(cmd.c_str());
    EXPECT_TRUE(WIFEXITED(raw) && WEXITSTATUS(raw) == 1) << args;
  }
}

}  // namespace
