// Token files (frontend/token_data.h): windows read as drawn; a file that is not a regular file
// is refused at once; one that shrinks while in use is an error naming it, not a SIGBUS.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "frontend/token_data.h"
#include "test_util.h"

namespace fusec {
namespace {

struct TokenFileOnDisk {
  std::string path = (std::filesystem::temp_directory_path() / ("fusec_tokens_" + std::to_string(::getpid()))).string();
  explicit TokenFileOnDisk(int n) {
    std::ofstream out(path, std::ios::binary);
    for (int k = 0; k < n; ++k) {
      const uint16_t v = uint16_t(k % 1000);
      out.write(reinterpret_cast<const char*>(&v), 2);
    }
  }
  ~TokenFileOnDisk() { std::filesystem::remove(path); }
};

TEST(TokenFile, WindowsAreTheFileAndTheirNextTokens) {
  TokenFileOnDisk f(5000);
  TokenFile t(f.path, TokenDType::U16);
  EXPECT_EQ(t.size(), 5000);
  EXPECT_EQ(t.at(1234), 234);
  std::mt19937_64 rng(3);
  Bindings b = t.sample(4, 16, rng);
  const HostTensor &ids = b.at("ids"), &targets = b.at("targets");
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t k = 0; k < 16; ++k) {
      const int64_t id = ids.i[size_t(r * 16 + k)];
      EXPECT_EQ(targets.i[size_t(r * 16 + k)], (id + 1) % 1000);
    }
}

TEST(TokenFile, AFileThatShrinksIsAnErrorNotASignal) {
  TokenFileOnDisk f(5000);
  TokenFile t(f.path, TokenDType::U16);
  std::filesystem::resize_file(f.path, 100);  // what `truncate` does to a corpus mid-run
  std::mt19937_64 rng(3);
  std::string e;
  for (int k = 0; k < 20 && e.empty(); ++k) e = test::errorOf([&] { t.sample(8, 64, rng); });
  EXPECT_EQ(e, f.path + ": the file shrank while in use (5000 tokens when opened, 50 now)");
}

TEST(TokenFile, OnlyRegularFiles) {
  const std::string dir = std::filesystem::temp_directory_path().string();
  EXPECT_EQ(test::errorOf([&] { TokenFile(dir, TokenDType::U16); }),
            "cannot read '" + dir + "': not a regular file (a directory)");
  const std::string fifo = dir + "/fusec_tokens_fifo_" + std::to_string(::getpid());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(test::errorOf([&] { TokenFile(fifo, TokenDType::U16); }),
            "cannot read '" + fifo + "': not a regular file (a named pipe)");
  std::filesystem::remove(fifo);
}

}  // namespace
}  // namespace fusec
