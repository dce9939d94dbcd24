#include "tools/fusec/job.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "ir/error.h"
#include "support/env.h"
#ifdef FUSEC_HAVE_NCCL
#include "runtime/collectives.h"
#endif

extern char** environ;

namespace fusec::cli {
namespace {

std::vector<std::string> gArgs;

// A port the kernel says is free now (rank 0 binds it a moment later).
int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) ::close(fd);
    throw Error(std::string("--gpus: cannot find a free port for the job's rendezvous: ") + std::strerror(errno));
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

// The GPUs this process may use, as CUDA_VISIBLE_DEVICES lists them; nullopt when it is unset
// (all of them). Set but empty hides every GPU, as CUDA reads it.
std::optional<std::vector<std::string>> visibleDevices() {
  std::vector<std::string> out;
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!v) return std::nullopt;
  std::stringstream s(v);
  for (std::string d; std::getline(s, d, ',');) out.push_back(d);
  return out;
}

// The device a local rank runs on, in CUDA_VISIBLE_DEVICES's terms.
std::string deviceOf(int localRank) {
  std::optional<std::vector<std::string>> visible = visibleDevices();
  if (!visible) return std::to_string(localRank);
  if (size_t(localRank) >= visible->size())
    throw Error("local rank " + std::to_string(localRank) + " has no GPU: CUDA_VISIBLE_DEVICES lists " +
                (visible->empty() ? std::string("none") : std::to_string(visible->size())));
  return (*visible)[size_t(localRank)];
}

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "stopped";
}

}  // namespace

void setCommandLine(int argc, char** argv) { gArgs.assign(argv, argv + argc); }

std::string rankPrefix() {
  if (!envSet("WORLD_SIZE") || !envSet("RANK") || std::string(std::getenv("WORLD_SIZE")) == "1") return "";
  return "rank " + std::string(std::getenv("RANK")) + ": ";
}

JobRole jobRole(int64_t gpus) {
  JobRole role;
  if (gpus < 0 || gpus > 1024) throw Error("--gpus must be in 1..1024, got " + std::to_string(gpus));
  JobAddress env = jobFromEnvironment();
  if (env.ranks == 0) {  // not started as a rank
    if (gpus > 1) {
      role.launcher = true;
      role.ranks = int(gpus);
    }
    return role;
  }
  if (gpus != 0 && gpus != env.ranks)
    throw Error("--gpus " + std::to_string(gpus) + " but WORLD_SIZE is " + std::to_string(env.ranks) +
                " (drop --gpus under torchrun)");
  role.ranks = env.ranks;
  role.rank = env.rank;
  role.address = env;
  if (env.ranks > 1) {
    // One GPU a rank: it is device 0 of this process from here on (set before CUDA starts).
    const int local = localRankFromEnvironment(env.rank);
    setenv("CUDA_VISIBLE_DEVICES", deviceOf(local).c_str(), 1);
  }
  return role;
}

int launchWorkers(int ranks) {
  if (gArgs.empty()) throw Error("internal: the command line was not recorded");
  const int port = freePort();
  // Every worker is this binary, however it was invoked.
  std::string self = "/proc/self/exe";
  std::vector<pid_t> pids(size_t(ranks), -1);
  for (int r = 0; r < ranks; ++r) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    auto set = [&](const std::string& k, const std::string& v, bool keep) {
      for (std::string& e : env)
        if (e.compare(0, k.size() + 1, k + "=") == 0) {
          if (!keep) e = k + "=" + v;
          return;
        }
      env.push_back(k + "=" + v);
    };
    set("RANK", std::to_string(r), false);
    set("WORLD_SIZE", std::to_string(ranks), false);
    set("LOCAL_RANK", std::to_string(r), false);
    set("LOCAL_WORLD_SIZE", std::to_string(ranks), false);
    set("MASTER_ADDR", "127.0.0.1", false);
    set("MASTER_PORT", std::to_string(port), false);
    // NVLink multicast stays off on shared hosts (NCCL's NVLS can take their GPUs out of
    // service); a value the user set wins.
    set("NCCL_NVLS_ENABLE", "0", true);
    set("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", true);
    set("NVSHMEM_DISABLE_NVLS", "1", true);
    std::vector<char*> argv, envp;
    for (std::string& a : gArgs) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::cout.flush();
    std::cerr.flush();
    pid_t pid = ::fork();
    if (pid < 0) throw Error(std::string("--gpus: cannot start a worker: ") + std::strerror(errno));
    if (pid == 0) {
      if (r != 0) {  // one rank speaks for the job: the losses it prints are the job's
        int devnull = ::open("/dev/null", O_WRONLY);
        if (devnull >= 0) ::dup2(devnull, STDOUT_FILENO);
      }
      ::execve(self.c_str(), argv.data(), envp.data());
      std::fprintf(stderr, "error: rank %d: cannot start %s: %s\n", r, self.c_str(), std::strerror(errno));
      std::_Exit(127);
    }
    pids[size_t(r)] = pid;
  }
  // Supervise: the first rank to fail is the job's error; the others have a minute to stop on
  // their own (they learn of it through the rendezvous connections) before they are killed.
  int running = ranks, code = 0;
  std::string first;
  auto deadline = std::chrono::steady_clock::time_point::max();
  while (running > 0) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        for (pid_t p : pids)
          if (p > 0) ::kill(p, SIGKILL);
        deadline = std::chrono::steady_clock::time_point::max();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    int r = 0;
    while (r < ranks && pids[size_t(r)] != pid) ++r;
    if (r == ranks) continue;
    pids[size_t(r)] = -1;
    --running;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && first.empty()) {
      first = "rank " + std::to_string(r) + " " + describeStatus(status);
      code = 1;
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    }
  }
  if (!first.empty()) std::cerr << "error: the job stopped: " << first << "\n";
  return code;
}

std::shared_ptr<rt::Communicator> joinJob(const JobRole& role, const std::string& fingerprint) {
#ifdef FUSEC_HAVE_NCCL
  return std::make_shared<rt::Communicator>(role.address, fingerprint, 120.0);
#else
  (void)role;
  (void)fingerprint;
  throw Error("this fusec was built without NCCL (nccl.h not found): it cannot join a data-parallel job");
#endif
}

}  // namespace fusec::cli
