// memory-plan: gives every top-level value that owns storage its byte offset (Value::offset,
// printed `@N`).
//
//   Arena values      offset in the function's arena, a scratch allocation reused every
//                     call. Two buffers that are live at the same time (passes/liveness.h)
//                     never overlap. Planner: a sweep over time with a coalescing free
//                     list (each buffer takes the best-fitting, or first, gap left by dead
//                     buffers, else grows the arena), forwards and backwards in time; the
//                     smallest arena wins, stopping early at the lower bound. O(n log n).
//   input / param     offset in the function's RESIDENT region (passes/resident_layout.h), a
//                     separate persistent allocation: so `@N` on a source is a resident
//                     offset, on anything else an arena offset.
//   everything else   -1: aliases (views: resolveView gives base and offset), resident
//                     concats (views of their first operand; a concat WITH an offset is one
//                     the resident layout could not honour, a copy), in-place
//                     update outputs (they live in their param's resident storage),
//                     constants, iotas and kernel-body values.
#pragma once
#include <cstdint>
#include <unordered_map>

#include "passes/liveness.h"
#include "support/ptr_hash.h"

namespace fusec {

struct ArenaPlan {
  PtrMap<const Value*, int64_t> offset;  // every Arena value
  int64_t bytes = 0;                                 // arena size
};

// Plans `live`'s buffers; pure (the graph is not touched).
ArenaPlan planArena(const Liveness& live);

struct MemoryPlanStats {
  int64_t plannedBytes = 0;          // arena size
  int64_t liveLowerBoundBytes = 0;   // max over time of the live arena bytes
  int64_t residentBytes = 0;         // params, optimizer state, inputs
  int64_t peakBytes = 0;             // resident + planned
};

// The statistics of the plan memory-plan computes for `g` in its current order.
// From the offsets memory-plan recorded when every arena value has one, else from a fresh plan.
MemoryPlanStats planMemoryStats(const Graph& g);

}  // namespace fusec
