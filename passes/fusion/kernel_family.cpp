#include "passes/fusion/kernel_family.h"

#include <algorithm>
#include <map>
#include <set>

#include "ir/attention_assembly.h"
#include "ir/strided_view.h"
#include "passes/fusion/attention_output.h"
#include "passes/fusion/domain.h"

namespace fusec {

using fusion::DomainKind;

const char* familyName(KernelFamily f) {
  switch (f) {
    case KernelFamily::Pointwise: return "pointwise";
    case KernelFamily::RowReduce: return "row_reduce";
    case KernelFamily::ColReduce: return "col_reduce";
    case KernelFamily::ReduceAll: return "reduce_all";
    case KernelFamily::Scatter: return "scatter";
    case KernelFamily::MultiTensor: return "multi_tensor";
    case KernelFamily::Attention: return "attention";
  }
  return "?";
}

std::optional<KernelFamily> familyNamed(std::string_view name) {
  for (KernelFamily f : {KernelFamily::Pointwise, KernelFamily::RowReduce, KernelFamily::ColReduce, KernelFamily::ReduceAll,
                         KernelFamily::Scatter, KernelFamily::MultiTensor, KernelFamily::Attention})
    if (name == familyName(f)) return f;
  return std::nullopt;
}

void recordKernelFamily(Op& kernel, KernelFamily family, std::string hint) {
  kernel.setAttr("family", std::string(familyName(family)));
  kernel.setAttr("hint", hint.empty() ? kernelHint(*kernel.body, family) : std::move(hint));
}

KernelFamily kernelFamily(const Op& kernel) {
  const std::string& recorded = kernel.attrStr("family");
  if (recorded.empty()) return classifyKernel(*kernel.body);
  if (auto f = familyNamed(recorded)) return *f;
  throw Error("kernel '" + kernel.attrStr("name") + "' records an unknown family \"" + recorded + "\"");
}

std::string kernelHintOf(const Op& kernel) {
  const std::string& recorded = kernel.attrStr("hint");
  return recorded.empty() ? kernelHint(*kernel.body, kernelFamily(kernel)) : recorded;
}

namespace {

void checkKernels(const Graph& g) {
  for (const auto& op : g.ops) {
    if (op->kind == OpKind::Kernel && op->body && !op->attrStr("family").empty()) {
      const KernelFamily recorded = kernelFamily(*op), family = classifyKernel(*op->body);
      if (recorded != family)
        throw Error("kernel '" + op->attrStr("name") + "' records family \"" + op->attrStr("family") + "\" but its body is a " +
                    familyName(family) + " kernel");
    }
    if (op->body) checkKernels(*op->body);
  }
}

}  // namespace

void checkKernelRecords(const Module& module) {
  for (const auto& f : module.funcs) checkKernels(*f);
}

KernelFamily classifyKernel(const Graph& body) {
  auto fail = [&](const std::string& why) -> KernelFamily {
    throw Error("kernel '" + body.name + "' fits no kernel family: " + why);
  };
  std::set<DomainKind> reductions;
  std::vector<fusion::Domain> rows, cols, alls;
  int scatters = 0, attentions = 0;
  for (auto& op : body.ops)
    attentions += op->kind == OpKind::Attention || op->kind == OpKind::AttentionBackward;
  if (attentions > 0) {
    if (attentions > 1) return fail("it holds more than one attention");
    const Op* att = nullptr;
    for (auto& op : body.ops)
      if (op->kind == OpKind::Attention || op->kind == OpKind::AttentionBackward) att = op.get();
    // Its results: the attention's; the forward's output may be stored permuted
    // (fusion/attention_output.h: a permute keeping the last axis of the attention's first
    // result); the backward's gradients may be stored into one assembled result
    // (ir/attention_assembly.h), whose ops it then holds.
    std::set<const Op*> assembly;
    for (Value* v : body.outputs) {
      const Op& d = *v->def;
      if (&d == att) continue;
      const bool permutedO = fusion::keepsRows(d) && d.operands[0]->def == att && d.operands[0]->index == 0 &&
                             att->kind == OpKind::Attention;
      if (permutedO) continue;
      std::vector<const Op*> ops;
      if (att->kind == OpKind::AttentionBackward && matchAttentionAssembly(v, *att, &ops)) {
        assembly.insert(ops.begin(), ops.end());
        continue;
      }
      return fail("an attention kernel returns only the attention's results (its output O also permuted, its gradients "
                  "assembled: ir/attention_assembly.h)");
    }
    for (auto& op : body.ops) {
      const bool attention = op.get() == att;
      if (!attention && op->kind != OpKind::Input && !isViewOp(op->kind) && !assembly.count(op.get()))
        return fail("an attention kernel holds only views of its inputs, not " + std::string(op->info().name));
    }
    return KernelFamily::Attention;
  }
  for (auto& op : body.ops) {
    if (op->kind == OpKind::ScatterAdd) ++scatters;
    const OpCategory c = op->info().category;
    if (c == OpCategory::Matmul || c == OpCategory::Composite || c == OpCategory::Fused)
      return fail("it holds " + std::string(op->info().name));
    if (c == OpCategory::Reduction) {
      const fusion::Domain d = fusion::domainOf(*op);
      if (d.kind != DomainKind::Pointwise) reductions.insert(d.kind);
      if (d.kind == DomainKind::Row) rows.push_back(d);
      if (d.kind == DomainKind::Col) cols.push_back(d);
      if (d.kind == DomainKind::All) alls.push_back(d);
    }
  }
  if (body.outputs.empty()) return fail("it has no outputs");
  if (scatters > 0) {
    if (scatters > 1 || !reductions.empty()) return fail("a scatter_add shares it with other scatters or reductions");
    return KernelFamily::Scatter;
  }
  // A row kernel that also sums its elements down the rows (fusion/domain.h columnSums).
  if (reductions == std::set<DomainKind>{DomainKind::Row, DomainKind::Col}) {
    for (const fusion::Domain& c : cols)
      for (const fusion::Domain& r : rows)
        if (!fusion::sumsColumnsOf(c, r)) return fail("its column reductions do not sum its rows' elements");
    return KernelFamily::RowReduce;
  }
  // A row kernel that also reduces its rows' results to one value (fusion/domain.h rowTotals).
  if (reductions == std::set<DomainKind>{DomainKind::Row, DomainKind::All}) {
    for (const fusion::Domain& a : alls)
      for (const fusion::Domain& r : rows)
        if (!fusion::totalsRowsOf(a, r)) return fail("its total does not reduce one value per row");
    return KernelFamily::RowReduce;
  }
  if (reductions.size() > 1) return fail("it mixes reductions of different shapes");
  if (reductions.empty()) {
    std::set<int64_t> counts;
    for (Value* v : body.outputs) counts.insert(v->type.numel());
    return counts.size() == 1 ? KernelFamily::Pointwise : KernelFamily::MultiTensor;
  }
  switch (*reductions.begin()) {
    case DomainKind::Row: return KernelFamily::RowReduce;
    case DomainKind::Col: return KernelFamily::ColReduce;
    default: return KernelFamily::ReduceAll;
  }
}

// LayerNorm's rsqrt reads the variance, a reduction of (x - mean), itself a reduction: two
// reductions deep. RMSNorm's reads mean(x^2), one deep (its backward's later row sum comes
// after the rsqrt, not before).
bool normalisesAfterTwoReductions(const Graph& body) {
  std::map<const Value*, int> depth;  // reductions on the longest path to the value
  for (auto& op : body.ops) {
    int d = 0;
    for (const Value* v : op->operands) d = std::max(d, depth.count(v) ? depth[v] : 0);
    if ((op->kind == OpKind::Rsqrt || op->kind == OpKind::Sqrt) && d >= 2) return true;
    if (op->info().category == OpCategory::Reduction) ++d;
    for (auto& r : op->results) depth[r.get()] = d;
  }
  return false;
}

std::string kernelHint(const Graph& body, KernelFamily family) {
  std::set<OpKind> k;
  bool onlyData = true;  // only layout ops and casts: a copy
  for (auto& op : body.ops) {
    k.insert(op->kind);
    const OpCategory c = op->info().category;
    onlyData &= c == OpCategory::Source || c == OpCategory::Layout || op->kind == OpKind::Cast;
  }
  auto has = [&](OpKind o) { return k.count(o) != 0; };
  switch (family) {
    case KernelFamily::Attention: return has(OpKind::AttentionBackward) ? "flash_bwd" : "flash_fwd";
    // The embedding gradient, or (with its update as the epilogue) the embedding's AdamW step.
    case KernelFamily::Scatter: return has(OpKind::Sqrt) && body.outputs.size() >= 3 ? "embedding_adamw" : "embedding_grad";
    case KernelFamily::ColReduce: return "colsum";
    case KernelFamily::ReduceAll: return "mean";
    case KernelFamily::RowReduce:
      if (has(OpKind::Log)) return "cross_entropy";
      if (has(OpKind::Exp)) return "softmax";
      if (has(OpKind::Rsqrt) || has(OpKind::Sqrt)) return normalisesAfterTwoReductions(body) ? "layernorm" : "rmsnorm";
      return "rowsum";
    case KernelFamily::Pointwise:
    case KernelFamily::MultiTensor: break;
  }
  if (has(OpKind::Sqrt) && body.outputs.size() >= 3) return "adamw";
  // RoPE's cos/sin of position x frequency: a small table (fuse materialises it once) that
  // the kernels applying the rotation read.
  if (has(OpKind::Sin) || has(OpKind::Cos)) return "rope_table";
  if (has(OpKind::Sigmoid)) return "swiglu";
  if (onlyData) return has(OpKind::Cast) ? "cast" : "copy";
  if (has(OpKind::Gather)) return "embedding";
  if (has(OpKind::Exp)) return "exp";
  return "ew";
}

}  // namespace fusec
