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

// What `interpret(g, ...)` will cost, from the graph alone (no values): the most bytes its
// values hold at once (each value from its op to its last reader, as interpret keeps them;
// f32 and bf16 stored as floats, integers as int64), the bytes all its values take together,
// and its GEMMs' FLOPs (2 * M * N * K each). `fusec run --device cpu` turns these into the
// estimate it prints before a run, and refuses a run whose peak the machine cannot hold.
struct InterpreterCost {
  int64_t peakBytes = 0, valueBytes = 0, gemmFlops = 0;
};
InterpreterCost interpreterCost(const Graph& g);

}  // namespace fusec
