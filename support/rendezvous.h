// How the ranks of a data-parallel job find each other before NCCL can: over TCP with rank 0
// at MASTER_ADDR:MASTER_PORT, the way torchrun and Slurm jobs are wired. Rank 0 listens; every
// other rank connects and sends its rank and its program's fingerprint; rank 0 checks that
// the ranks are the job's, once each, and that every fingerprint equals its own (the same
// model, flags and program: compiled programs that differ would deadlock in NCCL), then sends
// each one the blob (NCCL's unique id) or one line saying why the job is refused.
//
// The connections stay open for the whole job: they are how a rank learns that another one
// died (its socket closes) or gave up (it says so), so that no rank waits forever on a
// collective its peer will never join (Rendezvous::watch).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fusec {

struct JobAddress {
  int rank = 0, ranks = 1;
  std::string host = "127.0.0.1";  // rank 0's address
  int port = 0;
};

class Rendezvous {
 public:
  // Joins the job. Rank 0 passes the blob to hand out; the others receive it (blob()).
  // Throws Error (one line) when the job cannot be formed within `timeoutSeconds`: rank 0
  // cannot listen, a rank cannot reach rank 0, a rank is out of range or twice, or the
  // fingerprints differ ("rank 1's program differs from rank 0's ...").
  Rendezvous(const JobAddress& job, const std::string& fingerprint, const std::string& blob, double timeoutSeconds);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  const std::string& blob() const { return blob_; }
  int rank() const { return job_.rank; }
  int ranks() const { return job_.ranks; }

  // Starts a thread that watches the job's connections. When a peer stops (its process died:
  // the socket closed, or it sent a failure), `onPeerLost` is called once with a line naming
  // it, e.g. "rank 1 stopped (its connection closed: the process died or was killed)"; rank 0
  // also tells every other rank. A peer that said finish() first is not lost.
  void watch(std::function<void(const std::string&)> onPeerLost);
  // This rank is done (normally): its peers will not take its closing socket for a death.
  void finish();
  // This rank failed with `why`: its peers stop with a line naming it.
  void fail(const std::string& why);

 private:
  void join(const std::string& fingerprint, const std::string& blob, double timeoutSeconds);
  void closeAll();
  void sendAll(int fd, const std::string& msg);
  void stopWatching();
  JobAddress job_;
  std::string blob_;
  std::vector<int> peers_;  // rank 0: socket of rank r at r (-1 for itself); else: {rank 0's}
  int listener_ = -1;
  int wake_[2] = {-1, -1};  // a pipe that ends the watcher
  void* watcher_ = nullptr;  // std::thread*
  bool finished_ = false;
};

// The job this process belongs to, from the environment torchrun and Slurm set: RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT (LOCAL_RANK picks the GPU: localRank()). nullopt-like:
// ranks 0 when WORLD_SIZE is unset. Throws Error (one line) on a malformed or inconsistent
// value.
JobAddress jobFromEnvironment();
// LOCAL_RANK (else the rank when there is one host): the GPU this rank uses.
int localRankFromEnvironment(int rank);

}  // namespace fusec
