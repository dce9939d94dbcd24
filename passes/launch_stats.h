// Launch accounting for `fusec compile --stats` (docs/pipeline.md "Launch accounting").
//
// A launch is a top-level op that runs on the device: a `matmul` (a GEMM) or anything else
// that computes data (a `kernel`, or in an unfused graph each remaining compute op). Inputs,
// params, constants, iotas, resolvable views and resident concats are not launches.
//
// Each launch is attributed to a layer through the `layer` role attribute of the params it
// reads or updates (ir/roles.h; never their names):
//   forward launches (ancestors of an ordinary output, i.e. of the loss; every launch of a
//   function without update outputs) go to the highest layer among the params they depend
//   on, transitively;
//   backward launches (the rest) go to the highest layer among the params whose in-place
//   updates they feed, transitively.
// A launch that depends on (forward) or feeds (backward) a non-layer param other than the
// embedding (a weight some gather reads as its table, with its state and copies), or no
// layer param at all, counts as outside the layers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace fusec {

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

// Where one top-level op of a function sits in the step, by the rules above.
struct LaunchPlace {
  bool launch = false;    // it runs on the device (a GEMM or a kernel)
  bool backward = false;  // not an ancestor of an ordinary output (only with update outputs)
  int layer = -1;         // its layer; -1 outside the layers
};
class StorageMap;

// One per op of g.ops, in order. Shared by the stats, the profile and the memory timeline.
std::vector<LaunchPlace> launchPlaces(const Graph& g);
// The same from the caller's StorageMap of g (one numbering of g at a time: ir/numbering.h).
std::vector<LaunchPlace> launchPlaces(const Graph& g, const StorageMap& storage);

// Launch statistics of one function.
LaunchStats launchStats(const Graph& g);
// Of every function of a module: counts and per-layer vectors summed (functions run in turn).
LaunchStats launchStats(const Module& m);

}  // namespace fusec
