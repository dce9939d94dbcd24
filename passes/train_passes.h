// The training program's passes at function granularity: a model builder that owns one
// function (models::buildTrainStep) applies them to it without touching the rest of its
// module. The registered passes (autodiff, adamw) run these on every function.
#pragma once
#include "passes/adamw_update.h"
#include "ir/graph.h"

namespace fusec {

// When `g` returns exactly one float scalar (the loss) and has float params: appends the
// gradient of the loss w.r.t. every float param, in params() order, each named
// "<param>.grad", and returns `loss, grads...`. Returns false (unchanged) for a function with
// no float params; throws Error for one with float params that does not return one float
// scalar.
// When `g` has an input of role cotangent (ir/roles.h), it is a VJP program instead: the
// cotangent is the adjoint of its one output, and `g` then returns the gradients w.r.t. its
// float data inputs (named "d<input>", in input order) and its weights ("<param>.grad").
bool appendLossGradients(Graph& g);

// When `g` returns `loss, grads...` (as appendLossGradients leaves it): declares the f32[]
// input "step" (role step: the 1-based AdamW step) and the params "<p>.exp_avg",
// "<p>.exp_avg_sq" (roles exp_avg, exp_avg_sq of p, in p's layer) beside the existing ones, appends the AdamW update and returns `loss` then, per param,
// new weight, new exp_avg, new exp_avg_sq, each the in-place update of its param. Returns
// false for a function with no float params; throws Error for any other signature.
bool appendAdamWUpdate(Graph& g, const AdamWConfig& cfg);

// The float params of role weight (ir/roles.h) of `g`, in order: the weights that get
// gradients and optimizer state.
std::vector<Op*> trainableParams(const Graph& g);

}  // namespace fusec
