// The TCP rendezvous of a data-parallel job (support/rendezvous.h), as threads of one process
// on localhost: the blob reaches every rank; a rank whose fingerprint differs, a duplicate rank
// or a missing one refuses the job with one line; a rank that disappears is reported to every
// other rank, naming it; ranks that finish are not taken for lost.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <mutex>
#include <thread>

#include "support/rendezvous.h"
#include "test_util.h"

namespace fusec {
namespace {

using test::errorOf;

int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

JobAddress at(int rank, int ranks, int port) { return JobAddress{rank, ranks, "127.0.0.1", port}; }

TEST(Rendezvous, EveryRankGetsRankZerosBlob) {
  const int port = freePort();
  std::vector<std::future<std::string>> others;
  for (int r = 1; r < 3; ++r)
    others.push_back(std::async(std::launch::async, [=] { return Rendezvous(at(r, 3, port), "same", "", 10).blob(); }));
  Rendezvous zero(at(0, 3, port), "same", std::string("id\0with\nbytes", 13), 10);
  for (auto& f : others) EXPECT_EQ(f.get(), std::string("id\0with\nbytes", 13));
}

TEST(Rendezvous, RefusesRanksWhoseProgramsDiffer) {
  const int port = freePort();
  auto one = std::async(std::launch::async, [=] { return errorOf([=] { Rendezvous(at(1, 2, port), "b", "", 10); }); });
  const std::string want = "rank 1's program differs from rank 0's (every rank needs the same model, flags and program)";
  EXPECT_EQ(errorOf([=] { Rendezvous(at(0, 2, port), "a", "x", 10); }), want);
  EXPECT_EQ(one.get(), want);
}

TEST(Rendezvous, RefusesDuplicateAndMissingRanks) {
  int port = freePort();
  auto dup = std::async(std::launch::async, [=] { return errorOf([=] { Rendezvous(at(1, 3, port), "a", "", 10); }); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto dup2 = std::async(std::launch::async, [=] { return errorOf([=] { Rendezvous(at(1, 3, port), "a", "", 10); }); });
  EXPECT_EQ(errorOf([=] { Rendezvous(at(0, 3, port), "a", "x", 10); }), "two processes joined as rank 1");
  EXPECT_EQ(dup.get(), "two processes joined as rank 1");
  EXPECT_EQ(dup2.get(), "two processes joined as rank 1");
  port = freePort();
  EXPECT_EQ(errorOf([=] { Rendezvous(at(0, 2, port), "a", "x", 1); }), "rendezvous: rank 1 did not join within 1 s");
  EXPECT_EQ(errorOf([=] { Rendezvous(at(1, 2, port), "a", "", 0.3); }).rfind("rendezvous: cannot reach rank 0 at 127.0.0.1:", 0), 0u);
}

// Collects the lines the watchers report.
struct Lost {
  std::mutex m;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& l) {
      std::lock_guard<std::mutex> g(m);
      lines.push_back(l);
    };
  }
  std::vector<std::string> waitFor(size_t n) {
    for (int k = 0; k < 200; ++k) {
      {
        std::lock_guard<std::mutex> g(m);
        if (lines.size() >= n) return lines;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::lock_guard<std::mutex> g(m);
    return lines;
  }
};

TEST(Rendezvous, ALostRankIsNamedToEveryOther) {
  const int port = freePort();
  std::unique_ptr<Rendezvous> one, two;
  auto f1 = std::async(std::launch::async, [&] { one = std::make_unique<Rendezvous>(at(1, 3, port), "a", "", 10); });
  auto f2 = std::async(std::launch::async, [&] { two = std::make_unique<Rendezvous>(at(2, 3, port), "a", "", 10); });
  Rendezvous zero(at(0, 3, port), "a", "x", 10);
  f1.get();
  f2.get();
  Lost at0, at2;
  zero.watch(at0.sink());
  two->watch(at2.sink());
  one.reset();  // rank 1 dies: its socket closes without a word
  const std::string line = "rank 1 stopped (its connection closed: the process died or was killed)";
  EXPECT_EQ(at0.waitFor(1), std::vector<std::string>{line});
  EXPECT_EQ(at2.waitFor(1), std::vector<std::string>{line});
}

TEST(Rendezvous, FinishedRanksAreNotLostAndFailuresSayWhy) {
  int port = freePort();
  std::unique_ptr<Rendezvous> one;
  auto f1 = std::async(std::launch::async, [&] { one = std::make_unique<Rendezvous>(at(1, 2, port), "a", "", 10); });
  auto zero = std::make_unique<Rendezvous>(at(0, 2, port), "a", "x", 10);
  f1.get();
  Lost at0, at1;
  zero->watch(at0.sink());
  one->watch(at1.sink());
  one->finish();
  one.reset();
  zero->finish();
  zero.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(at0.waitFor(0).empty());
  EXPECT_TRUE(at1.waitFor(0).empty());

  port = freePort();
  auto f2 = std::async(std::launch::async, [&] { one = std::make_unique<Rendezvous>(at(1, 2, port), "a", "", 10); });
  zero = std::make_unique<Rendezvous>(at(0, 2, port), "a", "x", 10);
  f2.get();
  Lost again;
  zero->watch(again.sink());
  one->fail("out of GPU memory");
  EXPECT_EQ(again.waitFor(1), std::vector<std::string>{"rank 1 failed: out of GPU memory"});
}

TEST(Rendezvous, JobFromTheEnvironment) {
  for (const char* v : {"WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"}) unsetenv(v);
  EXPECT_EQ(jobFromEnvironment().ranks, 0);
  setenv("WORLD_SIZE", "4", 1);
  EXPECT_EQ(errorOf([] { jobFromEnvironment(); }), "WORLD_SIZE is set but RANK is not (launch with torchrun, or set both)");
  setenv("RANK", "4", 1);
  EXPECT_EQ(errorOf([] { jobFromEnvironment(); }), "RANK must be an integer in 0..3, got '4'");
  setenv("RANK", "2", 1);
  EXPECT_EQ(errorOf([] { jobFromEnvironment(); }), "WORLD_SIZE is 4 but MASTER_ADDR is not set");
  setenv("MASTER_ADDR", "10.0.0.1", 1);
  setenv("MASTER_PORT", "29501", 1);
  JobAddress job = jobFromEnvironment();
  EXPECT_EQ(job.rank, 2);
  EXPECT_EQ(job.ranks, 4);
  EXPECT_EQ(job.host, "10.0.0.1");
  EXPECT_EQ(job.port, 29501);
  EXPECT_EQ(localRankFromEnvironment(2), 2);
  setenv("LOCAL_RANK", "1", 1);
  EXPECT_EQ(localRankFromEnvironment(2), 1);
  for (const char* v : {"WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"}) unsetenv(v);
}

}  // namespace
}  // namespace fusec
