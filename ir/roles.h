// What a program's inputs and params are, as IR metadata rather than naming conventions:
// the `role`, `of` and `layer` attributes of `input` and `param` ops (ir/ops.def), kept by
// the printer and the parser, checked by the verifier, and read by every consumer (the
// optimizer grouping of fuse, launch statistics, program state, the runners), so a model
// whose parameters are named differently compiles, fuses and counts the same.
//
//   param:  role "weight" (the default: a trainable weight), "exp_avg" / "exp_avg_sq" (AdamW's
//           first / second moment of the weight named by `of`), "bf16_copy" (the low-precision
//           copy of the weight `of` that the GEMMs read, refreshed by the optimizer);
//           "buffer" (a tensor of the model that is not trained: an imported model's RoPE
//           tables, masks and folded constants; bound like a weight, never updated);
//           `layer`: the index of the transformer block the param belongs to, -1 (the
//           default) outside the blocks. A state or copy has its weight's layer.
//   input:  role "" (data: the default), "ids" (token ids), "targets" (the labels of the
//           loss), "step" (AdamW's 1-based step counter, f32[]), "cotangent" (the adjoint of
//           the function's one output: autodiff then turns the function into its VJP with
//           respect to its float data inputs, passes/train_passes.h).
// This is what XLA's input_output_alias and MLIR's argument attributes carry.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace fusec {

enum class Role {
  Data,       // input: no special meaning
  TokenIds,   // input: token ids
  Targets,    // input: the loss's labels
  StepCount,  // input: AdamW's step counter
  DropoutKey, // input: the step's random key of its dropout ops (ir/step_inputs.h)
  Cotangent,  // input: the adjoint of the function's output, for a VJP program
  Weight,     // param: a trainable weight
  ExpAvg,     // param: AdamW's first moment of `of`
  ExpAvgSq,   // param: AdamW's second moment of `of`
  WeightCopy, // param: the low-precision copy of `of` the GEMMs read
  Buffer,     // param: a model tensor that is not trained (bound like a weight, never updated)
};

// The attribute spelling ("" for Data) and its parse (nullopt for an unknown role).
std::string_view roleName(Role r);
std::optional<Role> parseRole(std::string_view text);
// Whether `r` is a role of `kind` (Input or Param).
bool roleFits(Role r, OpKind kind);
// Optimizer state and weight copies name the weight they belong to with `of`.
inline bool roleHasOwner(Role r) { return r == Role::ExpAvg || r == Role::ExpAvgSq || r == Role::WeightCopy; }

// The role of an input or param op (throws Error on an op of another kind or a role the
// verifier would refuse).
Role roleOf(const Op& source);
int64_t layerOf(const Op& source);              // -1 outside the transformer blocks
const std::string& ownerOf(const Op& source);   // the `of` weight, "" when none
void setRole(Op& source, Role r, const std::string& of = "");
void setLayer(Op& source, int64_t layer);

// The graph's input of role `r`, or null.
Op* findInputByRole(const Graph& g, Role r);
// The name of the weight a param belongs to: its own for a weight, its `of` for state and
// copies.
const std::string& ownerName(const Op& param);
// That weight's op (null when `of` names no param of `g`; a findParam, O(ops)).
const Op* ownerWeight(const Graph& g, const Op& param);

}  // namespace fusec
