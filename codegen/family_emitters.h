// The body of the __global__ function(s) of each kernel family. Each emitter writes the
// functions' code (after the signature generate.cpp writes) and returns their launches.
// Operand k is `in<k>`, result k is `out<k>` (kernel_abi.h).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "codegen/body_emitter.h"
#include "codegen/kernel_abi.h"
#include "codegen/target.h"

namespace fusec::codegen {

// Writes `extern "C" __global__ void __launch_bounds__(threads[, minBlocks]) name(<params>) {`
// for one launch. minBlocks > 0 asks ptxas for registers that let that many blocks share an SM.
using SignatureFn = std::function<void(KernelBuilder&, const std::string& name, int threads, int minBlocks)>;

struct FamilyInput {
  const Graph& body;
  std::string name;
  SignatureFn signature;
  Target target;
};

std::vector<Launch> emitPointwise(const FamilyInput& k, KernelBuilder& w);
std::vector<Launch> emitMultiTensor(const FamilyInput& k, KernelBuilder& w);
std::vector<Launch> emitScatter(const FamilyInput& k, KernelBuilder& w);
// An embedding scatter whose positions all fit its list (fusion::kMaxScatterEpilogueSources)
// sums a row of more than this many positions in segments of this many, in position order,
// and then adds the segments' sums in order (a fixed order: run-to-run identical results).
int64_t scatterRowSegment(int64_t columns);
// attention: a generated flash-attention kernel (codegen/attention_kernel.cpp).
std::vector<Launch> emitAttention(const FamilyInput& k, KernelBuilder& w);
// row_reduce, col_reduce and reduce_all: one parametrised emitter.
std::vector<Launch> emitReduction(const FamilyInput& k, KernelFamily family, KernelBuilder& w);

// Reduction functors and group reductions every reduction kernel's source starts with.
std::string reductionPrelude();

// Threads per block of the element-wise loops, and a grid that fills the target (every
// thread slot of every SM) without more blocks than elements need.
constexpr int kBlock = 256;
uint32_t elementGrid(int64_t n, const Target& t);

}  // namespace fusec::codegen
