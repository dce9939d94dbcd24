// Times a callable the way the seed reports did, but with CUDA events instead of host clocks:
// `warmup` untimed calls, then `iters` calls, each between two events on `stream` and each
// followed by a stream synchronisation, so every iteration starts from an idle GPU and is
// timed on its own (the median over iterations is the headline; bench/stats.h).
//
// Eager LibTorch work goes to torch's current stream, which is the legacy default stream
// (nullptr) unless someone changed it; the compiled side passes Executable::stream().
// Events on the legacy default stream wait for every blocking stream, so either way the
// events bracket the whole call.
#pragma once
#include <functional>
#include <vector>

namespace fusec::bench {

// Milliseconds per timed iteration. Throws Error (naming the CUDA call) on a CUDA failure;
// exceptions from `fn` propagate.
// `before` (optional) runs ahead of each call outside the timed region (e.g. a training
// loop's host-side step-counter upload, which synchronizes).
std::vector<double> timeOnStream(const std::function<void()>& fn, void* stream, int warmup, int iters,
                                 const std::function<void()>& before = {});

}  // namespace fusec::bench
