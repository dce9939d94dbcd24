// Which top-level values own storage, where that storage lives, and when arena buffers are
// live. One analysis that memory-plan, schedule, the stats and the tests share.
//
// Storage classes of a top-level value:
//   Resident  `input` and `param` results and the resident concats over them (see
//             passes/resident_layout.h): persistent, outside the arena.
//   InPlace   an update output (`return %w.new -> "w"`) that owns storage: its producer
//             writes straight into param w's resident storage, so it needs no arena buffer.
//   Arena     the result of any other op that computes data: matmul, kernel, and in an
//             unfused graph every remaining compute op (a concat that is not resident, a
//             gather, a reduction...). Also a view op whose view cannot be resolved
//             (resolveView is nullopt): it is a copy.
//   Alias     a resolvable view (reshape/permute/slice/broadcast) of another value: it reads
//             its root's storage and extends the root's live range to its own uses. Also an
//             all_reduce result reduced in place (ir/collectives.h): its operand is an Arena
//             value that nothing else reads; and a `shard` (a block of rows of its operand).
//   None      `constant` and `iota`: generated where they are read, never stored.
//
// A collective's operands live as long as its results (it runs beside the compute until its
// results' first reader waits for it).
// A buffer is live from its defining op to its last use (positions in g.ops, inclusive, so an
// op's operands and results coexist); a use through any chain of aliases counts as a use of
// the root; ordinary graph outputs (and roots of aliased outputs) live to g.ops.size(). A
// step-invariant buffer (ir/step_invariant.h) lives from 0 to g.ops.size(): computed at a
// program's first call only, it must keep its bytes through every later call.
// Buffer bytes are numel x dtype bytes rounded up to 256.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/graph.h"
#include "ir/numbering.h"
#include "passes/resident_layout.h"

namespace fusec {

constexpr int64_t kArenaAlignment = 256;
inline int64_t alignArena(int64_t bytes) { return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }
inline int64_t bufferBytes(const Type& t) { return alignArena(t.numel() * dtypeBytes(t.dtype)); }

enum class Storage { Resident, InPlace, Arena, Alias, None };

// The storage classes of every top-level value of one graph.
// Values are numbered (ir/numbering.h) when the map is made; the map and what is computed
// from it (computeLiveness) stay valid while the ops are reordered, not when ops are added or
// removed. A pass that keeps tables of its own beside it numbers them by numbering().
class StorageMap {
 public:
  explicit StorageMap(const Graph& g);
  Storage of(const Value* v) const { return cls_[numbers_.of(v)]; }
  // The value whose storage `v` reads: v itself unless it is an Alias.
  const Value* root(const Value* v) const;
  const ResidentLayout& resident() const { return resident_; }
  const GraphNumbering& numbering() const { return numbers_; }

 private:
  ResidentLayout resident_;
  GraphNumbering numbers_;
  std::vector<Storage> cls_;  // by value number
};

struct Buffer {
  const Value* value = nullptr;  // the Arena value that owns it
  int64_t bytes = 0;
  int def = 0, lastUse = 0;      // positions in g.ops, inclusive
  bool overlapsInTime(const Buffer& o) const { return def <= o.lastUse && o.def <= lastUse; }
};

struct Liveness {
  std::vector<Buffer> buffers;                    // in definition order
  std::vector<int64_t> liveBytes;                 // per op position: bytes of live buffers
  int64_t lowerBound = 0;                         // max of liveBytes: no plan can be smaller
};

Liveness computeLiveness(const Graph& g, const StorageMap& storage);
// Fills l.liveBytes (over `positions` op positions) and l.lowerBound from l.buffers.
void sumLiveBytes(Liveness& l, size_t positions);
inline Liveness computeLiveness(const Graph& g) { return computeLiveness(g, StorageMap(g)); }

}  // namespace fusec
