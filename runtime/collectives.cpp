#include "runtime/collectives.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "ir/error.h"
#include "support/env.h"

namespace fusec::rt {
namespace {

// The communicator stopRank aborts (one per process).
std::atomic<ncclComm_t> gComm{nullptr};

void check(ncclResult_t r, const std::string& what) {
  if (r != ncclSuccess && r != ncclInProgress) throw Error("NCCL: " + what + ": " + ncclGetErrorString(r));
}

ncclDataType_t ncclTypeOf(DType d) {
  switch (d) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    default: break;
  }
  throw Error("collectives take f32, bf16 or f16, not " + std::string(dtypeName(d)));
}

// FUSEC_COMM_TIMEOUT: seconds a step may wait on its collectives (default 300).
double stepTimeoutSeconds() { return envPositive("FUSEC_COMM_TIMEOUT", 300); }

// FUSEC_COMM_SMS: the SMs (NCCL's CTAs, one a channel) the collectives get; 0 leaves the count
// to NCCL and reserves none for them.
int commSmsFromEnvironment() { return int(envCount("FUSEC_COMM_SMS", kDefaultCommSms, 64)); }

}  // namespace

[[noreturn]] void stopRank(const std::string& line) {
  std::fprintf(stderr, "error: %s\n", line.c_str());
  std::fflush(stderr);
  if (ncclComm_t c = gComm.exchange(nullptr)) {
    // NCCL's abort ends its kernels that wait on the lost peer; it is bounded here in case it
    // waits itself.
    std::thread([c] { ncclCommAbort(c); }).detach();
    for (int k = 0; k < 50; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::_Exit(1);
}

struct Communicator::Impl {
  std::unique_ptr<Rendezvous> rendezvous;
  ncclComm_t comm = nullptr;
  double stepTimeout = 300;
  int sms = 0;
  bool finished = false;  // finish() or fail() said how this rank ends
};

Communicator::Communicator(const JobAddress& job, const std::string& fingerprint, double timeoutSeconds)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.stepTimeout = stepTimeoutSeconds();
  m.sms = commSmsFromEnvironment();
  ncclUniqueId id{};
  std::string blob;
  if (job.rank == 0) {
    check(ncclGetUniqueId(&id), "making the job's id");
    blob.assign(reinterpret_cast<const char*>(&id), sizeof id);
  }
  m.rendezvous = std::make_unique<Rendezvous>(job, fingerprint, blob, timeoutSeconds);
  if (m.rendezvous->blob().size() != sizeof id) throw Error("rendezvous: rank 0 sent an NCCL id of the wrong size");
  std::memcpy(&id, m.rendezvous->blob().data(), sizeof id);
  // From here a lost peer stops this rank: NCCL's initialisation itself waits on every rank.
  m.rendezvous->watch([](const std::string& line) { stopRank(line); });
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  if (m.sms > 0) config.minCTAs = config.maxCTAs = m.sms;
  check(ncclCommInitRankConfig(&m.comm, job.ranks, id, job.rank, &config),
        "joining the job (rank " + std::to_string(job.rank) + ")");
  gComm.store(m.comm);
}

Communicator::~Communicator() {
  if (!impl_) return;
  // Unwinding from an error: the peers must not wait for this rank, and NCCL's work in flight
  // may never complete, so it is aborted rather than destroyed (which could wait for it).
  if (!impl_->finished && impl_->rendezvous) impl_->rendezvous->fail("it stopped with an error (see its output)");
  if (ncclComm_t c = gComm.exchange(nullptr)) impl_->finished ? ncclCommDestroy(c) : ncclCommAbort(c);
}

int Communicator::rank() const { return impl_->rendezvous->rank(); }
int Communicator::ranks() const { return impl_->rendezvous->ranks(); }
int Communicator::reservedSms() const { return impl_->sms; }

std::string Communicator::ncclVersion() const {
  int v = 0;
  check(ncclGetVersion(&v), "version");
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

void Communicator::groupStart() { check(ncclGroupStart(), "group start"); }
void Communicator::groupEnd() { check(ncclGroupEnd(), "all_reduce"); }

void Communicator::allReduce(const void* send, void* recv, size_t count, DType dtype, bool mean, void* stream) {
  check(ncclAllReduce(send, recv, count, ncclTypeOf(dtype), mean ? ncclAvg : ncclSum, impl_->comm,
                      static_cast<cudaStream_t>(stream)),
        "all_reduce");
}

void Communicator::reduceScatter(const void* send, void* recv, size_t recvCount, DType dtype, bool mean, void* stream) {
  check(ncclReduceScatter(send, recv, recvCount, ncclTypeOf(dtype), mean ? ncclAvg : ncclSum, impl_->comm,
                          static_cast<cudaStream_t>(stream)),
        "reduce_scatter");
}

void Communicator::allGather(const void* send, void* recv, size_t sendCount, DType dtype, void* stream) {
  check(ncclAllGather(send, recv, sendCount, ncclTypeOf(dtype), impl_->comm, static_cast<cudaStream_t>(stream)),
        "all_gather");
}

void Communicator::synchronize(void* stream, const std::string& what) {
  const auto start = std::chrono::steady_clock::now();
  auto s = static_cast<cudaStream_t>(stream);
  for (int spins = 0;; ++spins) {
    cudaError_t q = cudaStreamQuery(s);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) {
      cudaGetLastError();
      throw Error(std::string("CUDA error while running ") + what + ": " + cudaGetErrorString(q));
    }
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(impl_->comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress)
      stopRank("rank " + std::to_string(rank()) + ": NCCL failed during " + what + ": " + ncclGetErrorString(async));
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > impl_->stepTimeout)
      stopRank("rank " + std::to_string(rank()) + ": " + what + " did not finish within " +
               std::to_string(int(impl_->stepTimeout)) + " s (a peer rank hangs; FUSEC_COMM_TIMEOUT sets the limit)");
    // Spin briefly (a step's end is usually close), then sleep: the host has nothing else to do.
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(200));
    else std::this_thread::yield();
  }
}

void Communicator::finish() {
  impl_->finished = true;
  impl_->rendezvous->finish();
}
void Communicator::fail(const std::string& why) {
  impl_->rendezvous->fail(why);
}

}  // namespace fusec::rt
