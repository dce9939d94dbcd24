// One rank's side of a data-parallel job on NCCL: the job formed over TCP (support/
// rendezvous.h: rank 0 hands out NCCL's id, every rank's program fingerprint checked), an
// NCCL communicator on this process's GPU, and the collective calls the Executable's launch
// list makes on its communication stream (runtime/executable.h).
//
// Faults never hang a rank: a peer that dies or fails is reported by the rendezvous
// connections, and this rank then stops at once with one line naming it (exit 1, after
// aborting NCCL); a step that does not finish within the timeout (a peer that hangs) stops
// it the same way.
#pragma once
#include <atomic>
#include <memory>
#include <string>

#include "ir/types.h"
#include "support/rendezvous.h"

namespace fusec::rt {

// The SMs a job's collectives get unless FUSEC_COMM_SMS says otherwise (see reservedSms).
constexpr int kDefaultCommSms = 0;

class Communicator {
 public:
  // Joins `job` on the current CUDA device. Throws Error (one line): no NCCL, a rendezvous
  // refused or timed out, NCCL's initialisation failed.
  Communicator(const JobAddress& job, const std::string& fingerprint, double timeoutSeconds);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int ranks() const;
  // The SMs the collectives run on (NCCL's CTAs, fixed at this count), which the GEMMs that
  // may overlap them leave free (runtime/executable.cpp); 0: NCCL's own count, none reserved.
  int reservedSms() const;
  std::string ncclVersion() const;

  // Enqueue on `stream` (a cudaStream_t); between groupStart and groupEnd NCCL fuses the calls
  // into one launch. f32 and bf16; `mean` divides the sum by the ranks (ncclAvg).
  void groupStart();
  void groupEnd();
  void allReduce(const void* send, void* recv, size_t count, DType dtype, bool mean, void* stream);
  void reduceScatter(const void* send, void* recv, size_t recvCount, DType dtype, bool mean, void* stream);
  void allGather(const void* send, void* recv, size_t sendCount, DType dtype, void* stream);

  // Waits for `stream` while watching NCCL's asynchronous errors and the deadline; a step
  // that never ends stops this rank (see above).
  void synchronize(void* stream, const std::string& what);

  // This rank is done: peers will not take its exit for a death.
  void finish();
  // This rank failed: its peers stop with a line naming it and `why`.
  void fail(const std::string& why);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Stops this process at once (exit 1) with "error: LINE" on stderr, aborting NCCL first when a
// communicator exists: what a rank does when the job cannot go on.
[[noreturn]] void stopRank(const std::string& line);

}  // namespace fusec::rt
