// Before planning: the forward attention's output O ([..., H, T, d]) reaches the output
// projection through a permute to [..., T, H, d] (the heads merged, a copy kernel), and the
// backward attention reads O as it is. The backward now reads that permute instead, through
// the inverse permute (a view the flash kernel reads in place), so O's only reader is the
// permute and the planner can have the flash kernel store O in the projection's layout
// (plan.cpp absorbOutputPermutes): one write of O, no copy kernel.
#pragma once
#include "ir/graph.h"

namespace fusec::fusion {

// A permute that keeps the last axis (the head dim stays contiguous) and moves others.
bool keepsRows(const Op& permute);

// The rewrite above, for every forward attention whose output is read by such a permute and
// otherwise by backward attentions only. Returns whether the graph changed.
bool readAttentionOutputThroughPermute(Graph& g);

}  // namespace fusec::fusion
