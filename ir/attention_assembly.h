// An attention backward's dq, dk and dv stored straight into the tensor that assembles them:
// in a model with a fused QKV projection that is d(QKV), the concat of the three along the
// projection's columns, each part reached through layout ops (reshape, permute) and, for dq
// and dk, through RoPE's backward rotation in the form passes/decompose.cpp writes (pairs
// (x[2i], x[2i + 1]) rotated by a [T, d/2] table of cos and one of sin, in f32 between a cast
// up and one back). The fusion planner moves such a tail into the attention kernel when this
// matches (passes/fusion/plan.cpp absorbBackwardAssembly) and codegen stores each result
// where the match says (codegen/attention_kernel.cpp): the kernel that merged the three (and
// rotated two) no longer reads them back and writes them again. One matcher, so the planner
// and codegen never disagree about what a tail means.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "ir/graph.h"

namespace fusec {

// Where one result of the attention op lands in the assembled value, and how it is rotated.
struct AssemblyPart {
  int result = -1;               // which result of the attention op
  int64_t offset = 0;            // of its element 0, in elements of the assembled value
  std::vector<int64_t> strides;  // per dim of the result, in elements of the assembled value
  // RoPE: element (..., t, 2i) and (..., t, 2i + 1) are stored as x0 c - x1 s and x0 s + x1 c,
  // c = cos[t, i], s = sin[t, i] (f32 tables [T, d/2]), x0 and x1 the result's pair rounded
  // to its dtype first. Both null: stored as computed.
  const Value* cos = nullptr;
  const Value* sin = nullptr;
};

// The parts `out` is assembled from, if `out` is made of `att`'s results alone (each at most
// once, the head dim contiguous) through concat, reshape and permute, with at most one RoPE
// rotation a part and none of dv (result 2); nullopt otherwise. `ops` (optional) receives every op between (out's
// definition included, `att` excluded), the RoPE tables' reshapes and broadcasts among them.
std::optional<std::vector<AssemblyPart>> matchAttentionAssembly(const Value* out, const Op& att,
                                                               std::vector<const Op*>* ops = nullptr);

}  // namespace fusec
