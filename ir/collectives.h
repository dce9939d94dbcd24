// What the rest of fusec needs to know about the collective ops (all_reduce, reduce_scatter,
// all_gather; ir/ops.def): which ops they are, and which result may live in an operand's
// storage. Kept beside the op table so that liveness, the memory plan, the scheduler and the
// runtime read one answer.
#pragma once
#include "ir/graph.h"

namespace fusec {

// Rank-dependent ops: the exchanges and `shard`.
inline bool isCollective(OpKind k) { return opInfo(k).category == OpCategory::Collective; }
// The collectives that move data between ranks (NCCL calls): all but `shard`, a local view.
inline bool communicates(OpKind k) { return isCollective(k) && k != OpKind::Shard; }

// The operand whose storage result `v` may reuse, or nullptr: all_reduce's result i reduces
// operand i in place (NCCL's in-place form, which needs no second buffer). Whether it does
// is the memory plan's call (passes/liveness.h: only where nothing else reads the operand).
const Value* inPlaceOperandOf(const Value* v);

}  // namespace fusec
