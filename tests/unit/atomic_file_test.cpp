// support/atomic_file.h: a file is replaced whole or not at all, whatever happens to the
// writer: an exception, a write error, or SIGKILL in the middle of a large write (a unit
// process here, and the real `fusec run --init-weights` of a 160 MB model).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>

#include "ir/error.h"
#include "support/atomic_file.h"

namespace fusec {
namespace {

namespace fs = std::filesystem;

struct Dir {
  fs::path path;
  explicit Dir(const std::string& name) : path(fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Dir() { fs::remove_all(path); }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (auto& e : fs::directory_iterator(path)) out.push_back(e.path().filename());
    std::sort(out.begin(), out.end());
    return out;
  }
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The hidden temporary of `target` in its directory, or "" while there is none.
fs::path temporaryOf(const fs::path& target) {
  for (auto& e : fs::directory_iterator(target.parent_path()))
    if (e.path().filename().string().rfind("." + target.filename().string() + ".tmp.", 0) == 0) return e.path();
  return {};
}

// Waits until `child`'s temporary for `target` holds at least `bytes`, then SIGKILLs it:
// whether the temporary was seen, and whether the kill came before the child finished.
struct Killed {
  bool started, killed;
};
Killed killWhileWriting(pid_t child, const fs::path& target, uintmax_t bytes, std::chrono::seconds patience) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  fs::path tmp;
  std::error_code ec;
  while (std::chrono::steady_clock::now() < deadline &&
         ((tmp = temporaryOf(target)).empty() || fs::file_size(tmp, ec) < bytes || ec))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  return {!tmp.empty(), WIFSIGNALED(status)};
}

TEST(AtomicFile, ReplacesWholeAndLeavesNoTemporary) {
  Dir d("atomic_replace");
  const fs::path p = d.path / "out.txt";
  writeFileAtomically(p, "first");
  writeFileAtomically(p, "second, longer");
  EXPECT_EQ(slurp(p), "second, longer");
  EXPECT_EQ(d.names(), std::vector<std::string>{"out.txt"});
}

TEST(AtomicFile, AnUncommittedWriteLeavesThePreviousFile) {
  Dir d("atomic_abort");
  const fs::path p = d.path / "w.bin";
  writeFileAtomically(p, "previous");
  try {
    AtomicFile f(p);
    f.stream() << "half of the new cont";
    throw std::runtime_error("the writer failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(slurp(p), "previous");
  EXPECT_EQ(d.names(), std::vector<std::string>{"w.bin"});
}

TEST(AtomicFile, FailuresAreOneLineErrorsNamingTheFile) {
  Dir d("atomic_errors");
  try {
    writeFileAtomically((d.path / "no/such/dir/x").string(), "x");
    FAIL() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot write '" + (d.path / "no/such/dir/x").string() + "': No such file or directory");
  }
  // A full disk: /dev/full accepts the open and fails the write; in place, as a device.
  if (fs::exists("/dev/full")) {
    EXPECT_THROW(writeFileAtomically("/dev/full", std::string(1 << 16, 'x')), Error);
  }
  // A device is written in place, not replaced by a regular file.
  writeFileAtomically("/dev/null", "discarded");
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
}

// A child process writes 256 MB through AtomicFile and is killed once the temporary holds
// data: the destination still holds the previous bytes.
TEST(AtomicFile, AWriterKilledMidWriteLeavesThePreviousFile) {
  Dir d("atomic_kill");
  const fs::path p = d.path / "big.bin";
  writeFileAtomically(p, "the previous file");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    AtomicFile f(p);
    const std::string chunk(1 << 20, 'n');
    for (int i = 0; i < 256; ++i) f.stream() << chunk << std::flush;
    f.commit();
    std::_Exit(0);
  }
  const Killed k = killWhileWriting(child, p, 1 << 20, std::chrono::seconds(30));
  ASSERT_TRUE(k.started) << "the writer never started";
  ASSERT_TRUE(k.killed) << "the writer finished before it was killed; make it write more";
  EXPECT_EQ(slurp(p), "the previous file");
}

// The same through the CLI: `fusec run --init-weights` of a 160 MB model, killed while it
// writes; the previous weights file is intact and still loads.
TEST(AtomicFile, FusecKilledWhileWritingWeightsLeavesThePreviousFile) {
  Dir d("atomic_cli_kill");
  const fs::path p = d.path / "w.safetensors";
  const std::string fusec = FUSEC_BINARY;
  ASSERT_EQ(std::system((fusec + " run --init-weights " + p.string() + " --model toy").c_str()), 0);
  const std::string previous = slurp(p);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::execl(fusec.c_str(), fusec.c_str(), "run", "--init-weights", p.c_str(), "--model", "small", "--layers", "4",
            static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  const Killed k = killWhileWriting(child, p, 16 << 20, std::chrono::seconds(120));
  ASSERT_TRUE(k.started) << "fusec never started writing";
  ASSERT_TRUE(k.killed) << "fusec finished before it was killed";
  EXPECT_EQ(slurp(p), previous);
  EXPECT_EQ(std::system((fusec + " run --program forward --weights " + p.string() +
                         " --model toy --random-inputs --device cpu --out " + (d.path / "o.safetensors").string() +
                         " >/dev/null").c_str()),
            0);
}

}  // namespace
}  // namespace fusec
