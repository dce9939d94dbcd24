// Lanes of a vector loop. An element-wise kernel gives each thread V consecutive elements of
// its output (lane j at last coordinate c + j, c a multiple of V). Through the layout ops of
// its body (reshape, permute, slice, concat, broadcast, gather's data) lane j reads each body
// input somewhere; when, for every lane, that is the same 16-byte-aligned vector of V
// elements at a compile-time offset, the thread loads the vector once and each lane takes its
// element from registers. That covers a slice of a merged GEMM output (SwiGLU's halves), a
// concat of such halves, a permute that keeps the last axis (the head split and merge), and
// RoPE's pairs (lane j of the rotated output reads elements 2*(j/2) and 2*(j/2)+1 of its
// vector). It is decided from shapes and attributes alone, never from the generated text.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "ir/graph.h"

namespace fusec::codegen {

// What is known of the index at which the value being evaluated is read, per lane.
struct LaneMap {
  // off[d][j]: lane j's coordinate along dim d minus lane 0's (lane 0's may be virtual:
  // outside the dim, for a concat operand that lane 0 does not read).
  std::vector<std::vector<int64_t>> off;
  // Lane 0's coordinate along d: exactly r[d] when g[d] == 0, else congruent to r[d] mod g[d]
  // (g[d] == 1: nothing known).
  std::vector<int64_t> g, r;
  std::vector<bool> active;  // lanes that read this value (a concat reads one operand per lane)
  bool broken = false;       // some lane's index is not a compile-time offset of lane 0's
  bool operator==(const LaneMap&) const = default;
};

// The map of an output of `shape` evaluated V lanes at a time (broken unless V divides the
// last dim).
LaneMap outputLanes(const Shape& shape, int V);

// The map of operand `k` of `op` (pointwise or layout) when its result is read with `m`.
LaneMap operandLanes(const Op& op, size_t k, const LaneMap& m, int V);

// A body input read with `m` as one aligned vector: voff[j] is the element of the vector
// lane j reads (meaningful for active lanes), and firstActive the lane that loads it.
struct VectorRead {
  std::vector<int64_t> voff;
  int firstActive = 0;
};
// nullopt when some active lane's element lies outside one aligned vector of V, when the
// tensor is not a whole number of vectors, or when every lane reads one element (a
// broadcast: a scalar load the compiler hoists).
std::optional<VectorRead> vectorRead(const Shape& input, const LaneMap& m, int V);

// The float body inputs that a vector loop over `roots` (outputs of one shape) reads as
// vectors somewhere, in body input order: the pointers its alignment test must cover. The
// walk follows exactly the maps BodyEmitter follows (operandLanes from outputLanes).
std::vector<const Value*> vectorInputs(const Graph& body, const std::vector<const Value*>& roots, int V);

}  // namespace fusec::codegen
