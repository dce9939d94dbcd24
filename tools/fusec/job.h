// How a CLI command becomes one rank of a data-parallel job (passes/data_parallel.h):
//
//   * `--gpus N` on one host, launched by hand: this process starts N workers, copies of its
//     own command line with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set (one
//     GPU each, through CUDA_VISIBLE_DEVICES), and supervises them: the first that fails is
//     named in one line, and any still running a minute later are killed.
//   * torchrun or Slurm set those variables themselves: the process is a rank as it is, on
//     the GPU LOCAL_RANK names; --gpus, if given, must equal WORLD_SIZE.
//
// A rank then joins the job (rendezvous with rank 0 over TCP, then NCCL) before compiling.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "support/rendezvous.h"

namespace fusec::rt {
class Communicator;
}

namespace fusec::cli {

// main() keeps its argv here: the workers run the same command line.
void setCommandLine(int argc, char** argv);

struct JobRole {
  bool launcher = false;  // start `ranks` workers instead of running
  int ranks = 1;          // 1: no job
  int rank = 0;
  JobAddress address;
};

// What this process is, given `--gpus` (0 when not given). Picks the rank's GPU (before any
// CUDA call). Throws Error (one line) for inconsistent flags and environment.
JobRole jobRole(int64_t gpus);

// Runs `ranks` workers of this command line and waits for them; the exit code of the job.
int launchWorkers(int ranks);

// Joins the job as `role` (ranks > 1): the communicator the program's collectives use (shared:
// its deleter is made where NCCL is, so builds without it need no definition).
// `fingerprint` is everything that makes the ranks' programs the same (flags, model).
std::shared_ptr<rt::Communicator> joinJob(const JobRole& role, const std::string& fingerprint);

// "rank R: " inside a job of several ranks, "" otherwise (main prefixes errors with it).
std::string rankPrefix();

}  // namespace fusec::cli
