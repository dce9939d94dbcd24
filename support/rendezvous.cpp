#include "support/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <set>
#include <thread>

#include "ir/error.h"
#include "support/env.h"

namespace fusec {
namespace {

using Clock = std::chrono::steady_clock;

// Frames: a 4-byte little-endian length, then that many bytes. Small (a fingerprint, NCCL's
// 128-byte id, one line), so a frame is read whole once poll says its socket is readable.
constexpr uint32_t kMaxFrame = 1 << 20;

std::string sysError(const std::string& what) { return what + ": " + std::strerror(errno); }

void writeAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) throw Error(sysError("rendezvous: sending to a peer"));
    p += k;
    n -= size_t(k);
  }
}

// Reads exactly n bytes before `deadline`; false on a clean end of stream at the start.
bool readAll(int fd, char* p, size_t n, Clock::time_point deadline) {
  size_t got = 0;
  while (got < n) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) throw Error("rendezvous: a peer did not answer in time");
    pollfd pfd{fd, POLLIN, 0};
    int r = ::poll(&pfd, 1, int(std::min<long long>(left, 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw Error(sysError("rendezvous: waiting for a peer"));
    if (r == 0) continue;
    ssize_t k = ::recv(fd, p + got, n - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      if (got == 0 && (errno == ECONNRESET || errno == EPIPE)) return false;
      throw Error(sysError("rendezvous: reading from a peer"));
    }
    if (k == 0) {
      if (got == 0) return false;
      throw Error("rendezvous: a peer closed its connection mid-message");
    }
    got += size_t(k);
  }
  return true;
}

void writeFrame(int fd, const std::string& msg) {
  const uint32_t n = uint32_t(msg.size());
  const char len[4] = {char(n & 0xff), char((n >> 8) & 0xff), char((n >> 16) & 0xff), char((n >> 24) & 0xff)};
  writeAll(fd, len, 4);
  writeAll(fd, msg.data(), msg.size());
}

// One frame, or nullopt-like false at a clean end of stream.
bool readFrame(int fd, std::string& msg, Clock::time_point deadline) {
  unsigned char len[4];
  if (!readAll(fd, reinterpret_cast<char*>(len), 4, deadline)) return false;
  const uint32_t n = uint32_t(len[0]) | uint32_t(len[1]) << 8 | uint32_t(len[2]) << 16 | uint32_t(len[3]) << 24;
  if (n > kMaxFrame) throw Error("rendezvous: a peer sent a malformed message (is MASTER_PORT another service's?)");
  msg.assign(n, '\0');
  if (n && !readAll(fd, msg.data(), n, deadline)) throw Error("rendezvous: a peer closed its connection mid-message");
  return true;
}

std::string head(const std::string& msg) { return msg.substr(0, msg.find('\n')); }
std::string tail(const std::string& msg) {
  const size_t nl = msg.find('\n');
  return nl == std::string::npos ? "" : msg.substr(nl + 1);
}

void noDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int listenOn(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(sysError("rendezvous: socket"));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(uint16_t(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 64) != 0) {
    std::string e = sysError("rendezvous: rank 0 cannot listen on port " + std::to_string(port));
    ::close(fd);
    throw Error(e + " (set MASTER_PORT to a free port)");
  }
  return fd;
}

// Connects to host:port, retrying until `deadline` (rank 0 may not be listening yet).
int connectTo(const std::string& host, int port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int e = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); e != 0)
    throw Error("rendezvous: cannot resolve MASTER_ADDR '" + host + "': " + ::gai_strerror(e));
  std::string last = "no address";
  while (true) {
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
        ::freeaddrinfo(res);
        noDelay(fd);
        return fd;
      }
      last = std::strerror(errno);
      ::close(fd);
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::freeaddrinfo(res);
  throw Error("rendezvous: cannot reach rank 0 at " + host + ":" + std::to_string(port) + " (" + last + ")");
}

}  // namespace

Rendezvous::Rendezvous(const JobAddress& job, const std::string& fingerprint, const std::string& blob,
                       double timeoutSeconds)
    : job_(job) {
  try {
    join(fingerprint, blob, timeoutSeconds);
  } catch (...) {
    closeAll();  // no destructor runs: a listener left open would take the next job's ranks
    throw;
  }
}

void Rendezvous::closeAll() {
  for (int fd : peers_)
    if (fd >= 0) ::close(fd);
  peers_.clear();
  if (listener_ >= 0) ::close(listener_);
  listener_ = -1;
}

void Rendezvous::join(const std::string& fingerprint, const std::string& blob, double timeoutSeconds) {
  const JobAddress& job = job_;
  if (job.ranks < 1 || job.rank < 0 || job.rank >= job.ranks)
    throw Error("rendezvous: rank " + std::to_string(job.rank) + " is not in a job of " + std::to_string(job.ranks));
  if (job.port < 1 || job.port > 65535) throw Error("rendezvous: MASTER_PORT must be in 1..65535, got " + std::to_string(job.port));
  const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(timeoutSeconds * 1000));
  if (job.rank != 0) {
    int fd = connectTo(job.host, job.port, deadline);
    peers_.push_back(fd);
    writeFrame(fd, "HELLO " + std::to_string(job.rank) + " " + std::to_string(job.ranks) + "\n" + fingerprint);
    std::string reply;
    if (!readFrame(fd, reply, deadline)) throw Error("rendezvous: rank 0 closed the connection before answering");
    if (head(reply) == "ERR") throw Error(tail(reply));
    if (head(reply) != "OK") throw Error("rendezvous: rank 0 sent a malformed answer");
    blob_ = tail(reply);
    return;
  }
  blob_ = blob;
  listener_ = listenOn(job.port);
  peers_.assign(size_t(job.ranks), -1);
  std::string refusal;  // the first reason to refuse the job
  int joined = 1;
  std::vector<int> pending;  // accepted sockets, in order, for a refusal's answer
  while (joined < job.ranks) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      std::string missing;
      for (int r = 1; r < job.ranks; ++r)
        if (peers_[size_t(r)] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      throw Error("rendezvous: rank" + std::string(missing.find(',') == std::string::npos ? " " : "s ") + missing +
                  " did not join within " + std::to_string(int(timeoutSeconds)) + " s");
    }
    pollfd pfd{listener_, POLLIN, 0};
    int r = ::poll(&pfd, 1, int(std::min<long long>(left, 1000)));
    if (r <= 0) continue;
    int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    noDelay(fd);
    std::string hello;
    try {
      if (!readFrame(fd, hello, deadline)) {
        ::close(fd);
        continue;
      }
    } catch (const Error&) {
      ::close(fd);
      continue;
    }
    int peerRank = -1, peerRanks = -1;
    if (std::sscanf(head(hello).c_str(), "HELLO %d %d", &peerRank, &peerRanks) != 2) {
      ::close(fd);  // not one of ours
      continue;
    }
    pending.push_back(fd);
    if (refusal.empty()) {
      if (peerRanks != job.ranks)
        refusal = "rank " + std::to_string(peerRank) + " was started for a job of " + std::to_string(peerRanks) +
                  " ranks, rank 0 for " + std::to_string(job.ranks);
      else if (peerRank < 1 || peerRank >= job.ranks)
        refusal = "a rank " + std::to_string(peerRank) + " joined a job of " + std::to_string(job.ranks) + " ranks";
      else if (peers_[size_t(peerRank)] >= 0)
        refusal = "two processes joined as rank " + std::to_string(peerRank);
      else if (tail(hello) != fingerprint)
        refusal = "rank " + std::to_string(peerRank) +
                  "'s program differs from rank 0's (every rank needs the same model, flags and program)";
    }
    if (peerRank >= 1 && peerRank < job.ranks && peers_[size_t(peerRank)] < 0) peers_[size_t(peerRank)] = fd;
    ++joined;
    if (!refusal.empty()) break;
  }
  if (!refusal.empty()) {
    for (int fd : pending) {
      try {
        writeFrame(fd, "ERR\n" + refusal);
      } catch (const Error&) {
      }
      if (std::find(peers_.begin(), peers_.end(), fd) == peers_.end()) ::close(fd);
    }
    throw Error(refusal);
  }
  for (int r = 1; r < job.ranks; ++r) writeFrame(peers_[size_t(r)], "OK\n" + blob_);
}

void Rendezvous::sendAll(int fd, const std::string& msg) {
  try {
    writeFrame(fd, msg);
  } catch (const Error&) {  // a peer already gone: the watcher reports it
  }
}

void Rendezvous::watch(std::function<void(const std::string&)> onPeerLost) {
  if (watcher_ || peers_.empty()) return;
  if (::pipe2(wake_, O_CLOEXEC) != 0) throw Error(sysError("rendezvous: pipe"));
  watcher_ = new std::thread([this, onPeerLost] {
    std::set<int> done;  // ranks that said they finished (rank 0: 0 for itself)
    bool lost = false;
    while (!lost) {
      std::vector<pollfd> fds{{wake_[0], POLLIN, 0}};
      std::vector<int> rankOf{-1};
      for (size_t r = 0; r < peers_.size(); ++r) {
        const int peer = job_.rank == 0 ? int(r) : 0;
        if (peers_[r] < 0 || done.count(peer)) continue;
        fds.push_back({peers_[r], POLLIN, 0});
        rankOf.push_back(peer);
      }
      if (fds.size() == 1) return;  // every peer finished
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents) return;  // stopWatching
      for (size_t k = 1; k < fds.size() && !lost; ++k) {
        if (!fds[k].revents) continue;
        const int peer = rankOf[k];
        std::string msg, line;
        bool open = false;
        try {
          open = readFrame(fds[k].fd, msg, Clock::now() + std::chrono::seconds(5));
        } catch (const Error&) {
        }
        if (open && msg == "BYE") {
          done.insert(peer);
          continue;
        }
        if (open && head(msg) == "FAIL") line = "rank " + std::to_string(peer) + " failed: " + tail(msg);
        else if (open && head(msg) == "LOST") line = tail(msg);
        else line = "rank " + std::to_string(peer) + " stopped (its connection closed: the process died or was killed)";
        if (job_.rank == 0)  // tell the others, so none waits on the lost rank
          for (size_t r = 1; r < peers_.size(); ++r)
            if (int(r) != peer && peers_[r] >= 0 && !done.count(int(r))) sendAll(peers_[r], "LOST\n" + line);
        lost = true;
        onPeerLost(line);
      }
    }
  });
}

void Rendezvous::stopWatching() {
  if (!watcher_) return;
  auto* t = static_cast<std::thread*>(watcher_);
  if (wake_[1] >= 0) {
    char c = 1;
    (void)!::write(wake_[1], &c, 1);
  }
  if (t->get_id() == std::this_thread::get_id()) t->detach();
  else t->join();
  delete t;
  watcher_ = nullptr;
}

void Rendezvous::finish() {
  if (finished_) return;
  finished_ = true;
  stopWatching();
  for (int fd : peers_)
    if (fd >= 0) sendAll(fd, "BYE");
}

void Rendezvous::fail(const std::string& why) {
  if (finished_) return;
  finished_ = true;
  stopWatching();
  for (int fd : peers_)
    if (fd >= 0) sendAll(fd, job_.rank == 0 ? "LOST\nrank 0 failed: " + why : "FAIL\n" + why);
}

Rendezvous::~Rendezvous() {
  stopWatching();
  closeAll();
  for (int fd : wake_)
    if (fd >= 0) ::close(fd);
}

JobAddress jobFromEnvironment() {
  JobAddress job;
  job.ranks = int(envInt("WORLD_SIZE", 0, 1, 65536));
  if (job.ranks == 0) return job;
  const char* rank = std::getenv("RANK");
  if (!rank || !*rank) throw Error("WORLD_SIZE is set but RANK is not (launch with torchrun, or set both)");
  job.rank = int(envInt("RANK", 0, 0, job.ranks - 1));
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) job.host = a;
  else if (job.ranks > 1) throw Error("WORLD_SIZE is " + std::to_string(job.ranks) + " but MASTER_ADDR is not set");
  job.port = int(envInt("MASTER_PORT", 29500, 1, 65535));
  return job;
}

int localRankFromEnvironment(int rank) { return int(envInt("LOCAL_RANK", rank, 0, 1023)); }

}  // namespace fusec
