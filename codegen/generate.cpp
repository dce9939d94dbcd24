#include "codegen/generate.h"

#include <cctype>
#include <map>

#include "codegen/cuda_types.h"
#include "codegen/family_emitters.h"
#include "codegen/helpers.h"

namespace fusec::codegen {

std::string sanitizeKernelName(const std::string& name) {
  std::string s;
  for (char c : name) s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "k_" + s;
  return s;
}

namespace {

// In-place pairs: result i updates param P and some operand is P itself (kernel_abi.h).
std::vector<std::pair<int, int>> inPlaceAliases(const Op& kernel, const Graph& g) {
  std::vector<std::pair<int, int>> out;
  for (size_t o = 0; o < g.outputs.size(); ++o) {
    const std::string& target = g.updateOf(o);
    if (target.empty() || g.outputs[o]->def != &kernel) continue;
    for (size_t k = 0; k < kernel.operands.size(); ++k) {
      const Op* def = kernel.operands[k]->def;
      if (def->kind == OpKind::Param && def->attrStr("name") == target) out.push_back({int(k), g.outputs[o]->index});
    }
  }
  return out;
}

// Whether every position the kernel computes fits a 32-bit int with room for a grid-stride
// loop's last step: every value of the body and every operand below 2^30 elements.
bool indexFitsInt(const Op& kernel) {
  constexpr int64_t kLimit = int64_t(1) << 30;
  for (const Value* v : kernel.operands)
    if (v->type.numel() >= kLimit) return false;
  for (const auto& op : kernel.body->ops)
    for (const auto& r : op->results)
      if (r->type.numel() >= kLimit) return false;
  return true;
}

}  // namespace

GeneratedKernel generateKernel(const Op& kernel, const Graph& enclosing, const Target& target, bool kernelIr) {
  if (kernel.kind != OpKind::Kernel || !kernel.body) throw Error("codegen: not a kernel op");
  const Graph& body = *kernel.body;
  GeneratedKernel k;
  k.name = k.image = sanitizeKernelName(kernel.attrStr("name"));
  // The family the fuse pass recorded (a kernel read from text had its record checked against
  // its body when it was read: checkKernelRecords).
  k.family = kernelFamily(kernel);
  for (const Value* v : kernel.operands) k.operands.push_back(v->type);
  for (const auto& r : kernel.results) k.results.push_back(r->type);
  k.aliases = inPlaceAliases(kernel, enclosing);

  auto restrictOf = [&](int operand, int result) {
    for (auto [o, r] : k.aliases)
      if (o == operand || r == result) return "";
    return " __restrict__";
  };
  SignatureFn signature = [&](KernelBuilder& w, const std::string& fn, int threads, int minBlocks) {
    std::string params;
    for (size_t i = 0; i < k.operands.size(); ++i)
      params += (params.empty() ? "" : ", ") + std::string("const ") + storageType(k.operands[i].dtype) + "*" +
                restrictOf(int(i), -1) + " in" + std::to_string(i);
    for (size_t i = 0; i < k.results.size(); ++i)
      params += (params.empty() ? "" : ", ") + storageType(k.results[i].dtype) + "*" + restrictOf(-1, int(i)) + " out" +
                std::to_string(i);
    w.line("");
    const std::string bounds = std::to_string(threads) + (minBlocks > 0 ? ", " + std::to_string(minBlocks) : "");
    w.open("extern \"C\" __global__ void __launch_bounds__(" + bounds + ") " + fn + "(" + params + ")");
    // First, before any read or write (kernel_abi.h, dependent launch): wait for the grid
    // before this one, then let the grid after this one be scheduled into the SMs that this
    // grid's last wave leaves free.
    if (target.hasDependentLaunch()) {
      w.line("asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");");
      w.line("asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");");
    }
  };

  KernelBuilder w;
  // Comments name body ops by position (#n), as `fusec opt` prints the kernel's body.
  const bool narrow = indexFitsInt(kernel);
  w.line("// fusec kernel " + k.name + " (" + familyName(k.family) + "); #n in comments is the n-th op of its body.");
  for (size_t i = 0; i < k.operands.size(); ++i) w.line("//   in" + std::to_string(i) + ": " + k.operands[i].str());
  for (size_t i = 0; i < k.results.size(); ++i) w.line("//   out" + std::to_string(i) + ": " + k.results[i].str());
  w.line("#include <cuda_bf16.h>");
  w.line("#include <cuda_fp16.h>");
  // Index arithmetic (positions, loop counters, div/mod by the static shapes) in 32 bits
  // when every tensor of the kernel is small enough: a 64-bit division by a constant is
  // several times the instructions of a 32-bit one, and the layout ops of a RoPE or head
  // split kernel do a few per element.
  w.line(std::string("typedef ") + (narrow ? "int" : "long long") + " fusec_idx;" +
         (narrow ? "  // every tensor of this kernel has fewer than 2^30 elements" : ""));
  const bool reduces = k.family == KernelFamily::RowReduce || k.family == KernelFamily::ColReduce ||
                       k.family == KernelFamily::ReduceAll;
  std::string text = w.str() + (reduces ? reductionPrelude() : "");
  KernelBuilder fw;
  FamilyInput in{body, k.name, signature, target};
  switch (k.family) {
    case KernelFamily::Pointwise: k.launches = emitPointwise(in, fw); break;
    case KernelFamily::MultiTensor: k.launches = emitMultiTensor(in, fw); break;
    case KernelFamily::Scatter: k.launches = emitScatter(in, fw); break;
    case KernelFamily::Attention: k.launches = emitAttention(in, fw); break;
    default: k.launches = emitReduction(in, k.family, fw); break;
  }
  for (Launch& l : k.launches) l.dependent = target.hasDependentLaunch();
  // A launch the device could not start would fail only when the step runs, far from here.
  for (const Launch& l : k.launches)
    if (int64_t(l.dynamicSmem) > target.smemPerBlock)
      throw Error("internal: kernel '" + k.name + "' needs " + std::to_string(l.dynamicSmem) + " bytes of shared memory a block; " +
                  target.arch() + " allows " + std::to_string(target.smemPerBlock));
  // The helpers the family's text calls, and only those, so other sources stay as they were.
  for (int h = 0; h < kHelpers; ++h)
    if (fw.uses(Helper(h))) text += helperSource(Helper(h));
  k.source = text + fw.str();
  if (kernelIr) k.kernelIr = fw.kir();
  return k;
}

namespace {

// Every kernel of `graphs`, identical sources generated once (GeneratedKernel::image).
std::vector<GeneratedKernel> generateGraphs(const std::vector<const Graph*>& graphs, const Target& target,
                                            bool kernelIr = false) {
  std::vector<GeneratedKernel> out;
  std::map<std::string, size_t> firstOf;  // source with the name replaced -> kernel
  for (const Graph* g : graphs)
    for (const auto& op : g->ops) {
      if (op->kind != OpKind::Kernel) continue;
      GeneratedKernel k = generateKernel(*op, *g, target, kernelIr);
      std::string key = k.source;
      for (size_t p; (p = key.find(k.name)) != std::string::npos;) key.replace(p, k.name.size(), "\x01");
      auto [it, fresh] = firstOf.emplace(key, out.size());
      if (!fresh) {
        const GeneratedKernel& first = out[it->second];
        k.image = first.image;
        k.source = first.source;
        for (size_t i = 0; i < k.launches.size(); ++i) k.launches[i].function = first.launches[i].function;
      }
      out.push_back(std::move(k));
    }
  return out;
}

}  // namespace

std::vector<GeneratedKernel> generateModule(const Module& m, const Target& target, bool kernelIr) {
  std::vector<const Graph*> graphs;
  for (const auto& g : m.funcs) graphs.push_back(g.get());
  return generateGraphs(graphs, target, kernelIr);
}

std::vector<GeneratedKernel> generateFunction(const Graph& g, const Target& target) {
  return generateGraphs({&g}, target);
}

}  // namespace fusec::codegen
