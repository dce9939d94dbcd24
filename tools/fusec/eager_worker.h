// fusec's side of the eager baseline: finds fusec-eager beside the fusec binary and runs one
// row in it (bench/eager_protocol.h). fusec links no LibTorch; without fusec-eager, bench
// says in one line how to build it and runs the other rows.
#pragma once
#include <optional>
#include <string>

#include "bench/attention_bench.h"
#include "bench/bench_case.h"

namespace fusec::cli {

// fusec-eager's path: $FUSEC_EAGER when set, else the one beside this fusec binary; nullopt
// when that file is not an executable.
std::optional<std::string> eagerWorker();

// Why there is no fusec-eager, and how to build it (bench's one line when eager rows were
// asked for).
std::string eagerWorkerMissing();

// One row in the worker. Throws Error with the worker's message (an OOM one becomes the row's
// OOM) or when the worker cannot run.
bench::TimedRun runEagerWorker(const std::string& worker, const bench::BenchCase& c, uint64_t seed);
bench::AttentionRun runEagerAttentionWorker(const std::string& worker, const bench::AttentionCase& c);

}  // namespace fusec::cli
