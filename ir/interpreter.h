// CPU reference interpreter for every op, fused kernel bodies included. It is the oracle
// for passes and for generated kernels: f32 arithmetic in float with double
// accumulators for reductions and matmul; bf16/f16 emulated by rounding every result to
// nearest-even; integer and bool values held as int64.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/host_tensor.h"  // HostTensor, Bindings, rounding

namespace fusec {

// Evaluates `g`; returns one tensor per graph output. Throws Error on a missing or
// mistyped binding or an out-of-range index, and on a collective over more than one rank
// (interpretRanks runs those).
std::vector<HostTensor> interpret(const Graph& g, const Bindings& env);

// Evaluates `g` as perRank.size() ranks of one data-parallel job, side by side: one thread a
// rank, each with its own bindings, meeting at every collective (all_reduce, reduce_scatter,
// all_gather), whose `ranks` must be perRank.size(). A collective's results are exact: sums in
// double over the ranks in rank order, rounded once to the dtype, the same bits on every
// rank. Returns each rank's outputs. An error on one rank stops every rank and is thrown
// (the first one raised).
std::vector<std::vector<HostTensor>> interpretRanks(const Graph& g, const std::vector<Bindings>& perRank);

}  // namespace fusec
