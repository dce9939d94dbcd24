// The kernel families codegen generates from: every kernel body the fuse pass
// builds belongs to exactly one, decided from the body alone.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace fusec {

enum class KernelFamily { Pointwise, RowReduce, ColReduce, ReduceAll, Scatter, MultiTensor, Attention };

const char* familyName(KernelFamily f);  // "pointwise", "row_reduce", ...

// pointwise: no reductions, every output has one element count; multi_tensor: no reductions,
// outputs of several element counts (independent chains, e.g. one layer's AdamW);
// row_reduce / col_reduce / reduce_all: every reduction iterates that way (see
// fusion/domain.h), except that a row_reduce may also sum its rows' elements by column, or
// reduce its rows' results to one value; scatter: one scatter_add and no reductions; attention: one attention or
// attention_backward composite whose operands are body inputs or views of them, returning
// only its results (a generated flash-attention kernel, codegen/attention_kernel.cpp). Throws Error for a body
// that fits none (a fuse bug, or a hand-written kernel codegen cannot handle).
KernelFamily classifyKernel(const Graph& body);

// A short description of what the body computes, from the ops inside ("rmsnorm",
// "softmax", "adamw", "rope", ...), for kernel names.
std::string kernelHint(const Graph& body, KernelFamily family);

// The family named `name` ("pointwise", ...), or nullopt.
std::optional<KernelFamily> familyNamed(std::string_view name);

// Records on a kernel op what its body is: the `family` and `hint` attributes that codegen and
// the profile read (kernelFamily, kernelHintOf). The fuse pass decides once when it outlines a
// body; a pass that changes a body records again. `hint` empty: kernelHint's.
void recordKernelFamily(Op& kernel, KernelFamily family, std::string hint = "");
// A module read from text (a hand-written or dumped .fir): every kernel op that records a
// family is checked against its body, where a wrong record would generate a wrong kernel.
// Throws Error naming the kernel. Codegen then reads the records without checking again.
void checkKernelRecords(const Module& module);
// A kernel op's recorded family (what the fuse pass, or a pass that changed the body,
// decided). A kernel nobody decided (hand-written, with no record) is classified here.
KernelFamily kernelFamily(const Op& kernel);
// A kernel op's recorded hint; for a hand-written kernel, kernelHint's.
std::string kernelHintOf(const Op& kernel);

}  // namespace fusec
