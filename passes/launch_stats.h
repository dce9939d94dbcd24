// Launch accounting for `fusec compile --stats` (docs/pipeline.md "Launch accounting").
//
// A launch is a top-level op that runs on the device: a `matmul` (a GEMM) or anything else
// that computes data (a `kernel`, or in an unfused graph each remaining compute op). Inputs,
// params, constants, iotas, resolvable views and resident concats are not launches.
//
// Each launch is attributed to a layer through the params named `layers.<i>.`:
//   forward launches (ancestors of an ordinary output, i.e. of the loss; every launch of a
//   function without update outputs) go to the highest layer among the params they depend
//   on, transitively;
//   backward launches (the rest) go to the highest layer among the params whose in-place
//   updates they feed, transitively.
// A launch that depends on (forward) or feeds (backward) a non-layer param other than the
// embedding, or no layer param at all, counts as outside the layers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace fusec {

struct LaunchStatsOptions {
  std::string layerPrefix = "layers.";                // then the layer index and a '.'
  std::string embeddingPrefix = "token_embeddings.";  // non-layer params that do not count
};

struct LaunchStats {
  int64_t gemms = 0, kernels = 0;  // launches = gemms + kernels
  struct PerLayer {
    int64_t forward = 0, backward = 0;
  };
  PerLayer launchesPerLayer;  // max over layers of each
  PerLayer outside;           // launches outside the layers
  std::vector<int64_t> forwardPerLayer, backwardPerLayer;  // index = layer (sized to the highest layer + 1)
  int64_t launches() const { return gemms + kernels; }
};

// Launch statistics of one function.
LaunchStats launchStats(const Graph& g, const LaunchStatsOptions& opts = {});
// Of every function of a module: counts and per-layer vectors summed (functions run in turn).
LaunchStats launchStats(const Module& m, const LaunchStatsOptions& opts = {});

}  // namespace fusec
