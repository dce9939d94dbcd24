// row_reduce, col_reduce and reduce_all as one scheme: a group of L threads owns one
// "outer" point (a row, a column, the single scalar) at a time and strides over its r
// reduced elements; each reduction is a per-thread f32 (or integer) accumulator in a fixed
// order, combined across the group by a fixed shuffle/shared-memory tree. Results are
// therefore deterministic run to run. The three families differ only in L:
//   row_reduce: L = a warp per row, more warps for long rows (rowLanes: at most 24 of a
//               row's elements per thread, up to 512 threads), combined through shared
//               memory behind a named barrier of the row's warps alone;
//   col_reduce: a block owns a tile of 32 x V columns: row lanes per column (32 of 1024
//               threads; 8 of 256 when V > 1), each summing every 8th or 32nd row (a warp
//               reads 32 x V adjacent columns of one row, coalesced), then the lanes
//               combined in order through shared memory.
//               V adjacent columns per thread (16 bytes of the narrowest input) when the
//               last axis is kept and V divides it: 16-byte loads through codegen/lanes.h,
//               as the pointwise loops do; with one column per thread the warp's loads were
//               64-byte rows and the split-reduction partials ran at 35% of the copy
//               bandwidth. (One thread per column summing all rows, the first version, was
//               latency-bound: 0.46 ms for 1024 x 768 on an H200, 25 times per small step.)
//   reduce_all: one block of 1024 threads.
// Reductions run by level (reductionLevels: softmax's max, then its sum; cross-entropy's
// max and label logit together, then its sum), a pass over the row and one group reduction
// per level; ops after a reduction read its value from a register. Row-shaped outputs are
// written by lane 0, full-shaped ones in a last pass over the row. A row kernel may also sum
// its elements down the rows (ColumnSums) or total its rows' values (RowTotals).
#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "codegen/cuda_types.h"
#include "codegen/family_emitters.h"
#include "codegen/scalar_ops.h"
#include "codegen/vector_io.h"
#include "ir/type_rules.h"
#include "passes/fusion/domain.h"

namespace fusec::codegen {

namespace {

struct Reduction {
  const Op* op;
  Shape kept, reduced;  // the input shape with the reduced / kept dims set to 1
  int64_t n, r;
};

Reduction analyse(const Op& op) {
  Reduction red{&op, op.operands[0]->type.shape, op.operands[0]->type.shape, 0, 0};
  const int rank = op.operands[0]->type.rank();
  std::vector<bool> isReduced(size_t(rank), false);
  for (int64_t a : op.attrInts("axes")) isReduced[size_t(normalizeAxis(a, rank, "reduction"))] = true;
  for (int d = 0; d < rank; ++d) (isReduced[size_t(d)] ? red.kept : red.reduced)[size_t(d)] = 1;
  red.n = Type{DType::f32, red.kept}.numel();
  red.r = Type{DType::f32, red.reduced}.numel();
  return red;
}

// The full input index of element `inner` of the point whose kept index is `k`.
Index fullIndex(KernelBuilder& w, const Reduction& red, Index k, const IndexExpr& inner, const std::string& prefix) {
  Index r = delinearize(w, inner, red.reduced, prefix + "r");
  for (size_t d = 0; d < k.size(); ++d)
    if (red.kept[d] == 1 && red.reduced[d] != 1) k[d] = r[d];
  return k;
}

std::string initValue(OpKind k, DType d) {
  const bool f = isFloat(d);
  switch (k) {
    case OpKind::RMax: return f ? "-__int_as_float(0x7f800000)" : "(-9223372036854775807LL - 1)";
    case OpKind::RMin: return f ? "__int_as_float(0x7f800000)" : "9223372036854775807LL";
    default: return literal(isFloat(d) ? DType::f32 : d, 0);
  }
}

const char* combiner(OpKind k) { return k == OpKind::RMax ? "fusec_max" : k == OpKind::RMin ? "fusec_min" : "fusec_sum"; }

// Combining functors (formulas of add/max/min from ir/ops.def: max and min propagate NaN
// as the interpreter does) and the group reductions.
std::string prelude() {
  auto functor = [](const char* name, OpKind k, const char* nanForm) {
    return std::string("struct ") + name + " {\n  template <class T> __device__ T operator()(T a, T b) const { return " +
           scalarFormula(k, {"a", "b"}) + "; }\n" +
           (nanForm ? std::string("  __device__ float operator()(float a, float b) const { return ") + nanForm + "(a, b); }\n"
                    : std::string()) +
           "};\n";
  };
  // f32 max and min in one instruction (max.NaN / min.NaN, sm_80 on) where the formula's
  // compare-and-select takes four: cross-entropy takes a max per logit.
  auto nanForm = [](const char* name, const char* ptx, OpKind k) {
    return std::string("__device__ __forceinline__ float ") + name + "(float a, float b) {\n#if __CUDA_ARCH__ >= 800\n" +
           "  float r;\n  asm(\"" + ptx + " %0, %1, %2;\" : \"=f\"(r) : \"f\"(a), \"f\"(b));\n  return r;\n#else\n" +
           "  return " + scalarFormula(k, {"a", "b"}) + ";\n#endif\n}\n";
  };
  const std::string nanMinMax =
      nanForm("fusec_fmax_nan", "max.NaN.f32", OpKind::Max) + nanForm("fusec_fmin_nan", "min.NaN.f32", OpKind::Min);
  return nanMinMax + functor("fusec_sum", OpKind::Add, nullptr) + functor("fusec_max", OpKind::Max, "fusec_fmax_nan") +
         functor("fusec_min", OpKind::Min, "fusec_fmin_nan") +
         R"(// Butterfly over a warp: every lane ends with the same value, combined in a fixed order.
template <class T, class Op> __device__ T fusec_warp_reduce(T v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// A group of LANES threads (whole warps; the block when LANES == BLOCK) waits for its own
// threads only: named barrier 1 + g for group g of the block (barrier 0 is __syncthreads).
// The barrier's number is an immediate: with a register operand ptxas reserves all 16
// barriers, and an SM holds four such blocks whatever their registers allow.
template <int G, int LANES, int GROUPS> __device__ __forceinline__ void fusec_group_bar(int g) {
  if constexpr (G < GROUPS) {
    if (g == G) asm volatile("bar.sync %0, %1;" : : "n"(1 + G), "n"(LANES) : "memory");
    else fusec_group_bar<G + 1, LANES, GROUPS>(g);
  }
}
template <int LANES, int BLOCK> __device__ __forceinline__ void fusec_group_sync() {
  if constexpr (LANES == BLOCK) __syncthreads();
  else fusec_group_bar<0, LANES, BLOCK / LANES>((int)threadIdx.x / LANES);
}
// A reduction over a group of warps: each warp's butterfly result in its slot of `part`
// (the block's warps side by side), then, after fusec_group_sync, every thread combines its
// group's warps in warp order. Several reductions share one pair of barriers.
template <class T, class Op> __device__ __forceinline__ void fusec_warp_part(T v, Op op, T* part) {
  v = fusec_warp_reduce(v, op);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
}
// Counts this block in at `count` once every thread's writes are done, and tells every
// thread whether it was the block that made the count `expected` + 1 (the last to finish).
// Thread 0's one atomic is acq_rel at GPU scope: release makes the block's writes (ordered
// before it by the barrier) visible before the count, acquire lets the last block read every
// other block's. A __threadfence in every thread before it and after it cost 0.8 us of
// medium's 27 us rmsnorm backward (H200, two such counts a launch).
__device__ __forceinline__ bool fusec_arrive_last(unsigned* count, unsigned expected) {
  __shared__ bool last;
  __syncthreads();  // the block's writes, and the previous call's readers of `last`
  if (threadIdx.x == 0) {
    unsigned old;
    asm volatile("atom.acq_rel.gpu.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(count) : "memory");
    last = old == expected;
  }
  __syncthreads();
  return last;
}
template <int LANES, class T, class Op> __device__ __forceinline__ T fusec_group_total(const T* part, Op op) {
  const T* p = part + threadIdx.x / LANES * (LANES / 32);
  T r = p[0];
#pragma unroll
  for (int w = 1; w < LANES / 32; ++w) r = op(r, p[w]);
  return r;
}
// Over the row lanes of a column tile (col_reduce: thread t holds column t % 32 of the tile
// and row lane t / 32): every thread combines its column's lane values in lane order.
template <class T, class Op> __device__ T fusec_col_reduce(T v, Op op) {
  __shared__ T part[32][33];  // +1: the column reads do not all hit one bank
  __syncthreads();            // the previous reduction's readers are done with `part`
  part[threadIdx.x / 32][threadIdx.x % 32] = v;
  __syncthreads();
  T r = part[0][threadIdx.x % 32];
  for (unsigned k = 1; k < blockDim.x / 32; ++k) r = op(r, part[k][threadIdx.x % 32]);
  return r;
}
// The same for V adjacent columns per thread (thread t holds columns (t % 32) * V + j)
// and LANES = blockDim.x / 32 row lanes, in place. Stored column j-major (j * 32 + t % 32)
// so that neither the writes nor the reads of a warp conflict on a bank.
template <int V, int LANES, class T, class Op> __device__ void fusec_col_reduce_v(T* v, Op op) {
  __shared__ T part[LANES][32 * V];
  __syncthreads();  // the previous reduction's readers are done with `part`
#pragma unroll
  for (int j = 0; j < V; ++j) part[threadIdx.x / 32][j * 32 + threadIdx.x % 32] = v[j];
  __syncthreads();
#pragma unroll
  for (int j = 0; j < V; ++j) {
    T r = part[0][j * 32 + threadIdx.x % 32];
#pragma unroll
    for (int k = 1; k < LANES; ++k) r = op(r, part[k][j * 32 + threadIdx.x % 32]);
    v[j] = r;
  }
}
)";
}

// A row kept in registers (row_reduce with a short static row): each thread of a point's
// group loads its elements of every input read in place once, C chunks of V consecutive
// elements (chunk c at inner (c * L + lane) * V), into float arrays indexed only by unrolled
// constants, so they stay in registers; every pass then reads those. V > 1 loads 16-byte
// vectors when the pointers are aligned.
// Costly values (exp, division, ...: ops.def's FIR_COSTLY) that a later pass reads again are
// kept too: cross-entropy's gradient pass recomputed the exp(x - max) of its sum pass, one
// expf per logit more in a kernel that ran at 31% of the copy bandwidth.
// A bf16/f16 input stays packed, two elements per register (a row of 24 takes 12), and is
// widened where it is read (exact: a shift for bf16). Registers are what limit these
// kernels' warps per SM, and so the loads in flight.
// Inputs of the row's length that every row reads alike through a broadcast (a norm's
// weight) are loaded per chunk as vectors in each pass, b<k>: element by element they were
// a scalar load per element and pass, each waiting on L1.
struct RowRegisters {
  int width = 1;
  int64_t chunks = 0;                // 0: the row is re-read from memory in every pass
  std::vector<const Value*> inputs;  // register array r<k> holds inputs[k]
  std::vector<bool> packed;          // r<k> holds inputs[k] as 16-bit pairs
  std::vector<const Value*> rowConstants;  // b<k>: rowConstants[k], of shape [r], the same for every row
  std::vector<int> vectorOuts;       // full outputs stored as vectors
  // Register array k<i> holds cached[i].first, computed by pass cached[i].second (passes:
  // the reduction levels in order, then the full outputs' pass).
  std::vector<std::pair<const Value*, size_t>> cached;
  bool columnRegisters = true;  // column sums' accumulators fit beside the row
  // The row staged in shared memory instead (Target::rowShared): too long for registers, it
  // fits there. Loaded from memory once, each thread's chunks go to its own slice of the
  // dynamic shared memory (words stride[k] apart from one thread to the next, input k's
  // slices from word offset[k]), and every pass reads a chunk back into a chunk-sized r<k>.
  // A stride of 4 (mod 8) words lets a quarter warp's 16-byte accesses hit 32 banks.
  bool shared = false;
  std::vector<int64_t> stride, offset;
  int64_t sharedBytes = 0;
  // 32-bit words chunk-sized r<k> takes (a packed input two elements a word).
  int64_t chunkWords(size_t k) const { return packed[k] ? width / 2 : width; }
};

constexpr int64_t kMaxRowElementsPerThread = 32, kMaxRowRegisters = 96, kMaxColumnRegisters = 80;

// The kept dims before the reduced ones: element `inner` of point `outer` is at row-major
// position outer * r + inner of the reduction's operand.
bool reducesSuffix(const Reduction& red) {
  bool reduced = false;
  for (size_t d = 0; d < red.kept.size(); ++d) {
    if (red.reduced[d] != 1) reduced = true;
    else if (reduced && red.kept[d] != 1) return false;
  }
  return true;
}

RowRegisters planRow(const Graph& body, const std::vector<Reduction>& reds, const std::vector<std::vector<size_t>>& levels,
                     const std::vector<bool>& picked, const std::vector<int>& fullOuts,
                     const std::vector<const Op*>& cols, int lanes, const BodyEmitter& emitter, int64_t sharedBudget = 0) {
  RowRegisters plan;
  std::vector<const Value*> roots;
  for (size_t i = 0; i < reds.size(); ++i) {
    if (!reducesSuffix(reds[i])) return plan;
    if (!picked[i]) roots.push_back(reds[i].op->operands[0]);
  }
  for (int o : fullOuts) roots.push_back(body.outputs[size_t(o)]);
  for (const Op* c : cols) roots.push_back(c->operands[0]);
  plan.inputs = inputsReadInPlace(body, roots);
  if (plan.inputs.empty()) return plan;
  const int64_t r = reds[0].r;
  const Shape& full = reds[0].op->operands[0]->type.shape;
  if (!full.empty() && full.back() == r) {
    std::set<const Value*> broadcast;
    for (const auto& op : body.ops)
      if (op->kind == OpKind::Broadcast) broadcast.insert(op->operands[0]);
    for (const Op* in : body.inputs()) {
      const Value* v = in->result();
      if (isFloat(v->type.dtype) && v->type.shape == Shape{r} && broadcast.count(v) &&
          !std::count(plan.inputs.begin(), plan.inputs.end(), v))
        plan.rowConstants.push_back(v);
    }
  }
  std::vector<DType> dtypes;
  for (const Value* in : plan.inputs) dtypes.push_back(in->type.dtype);
  for (const Value* in : plan.rowConstants) dtypes.push_back(in->type.dtype);
  for (int o : fullOuts)
    if (isFloat(body.outputs[size_t(o)]->type.dtype)) {
      plan.vectorOuts.push_back(o);
      dtypes.push_back(body.outputs[size_t(o)]->type.dtype);
    }
  const int v = coalescedWidth(dtypes);
  plan.width = r % v == 0 ? v : 1;
  if (plan.width == 1) plan.vectorOuts.clear(), plan.rowConstants.clear();
  const int64_t chunks = (r + lanes * plan.width - 1) / (lanes * plan.width), perThread = chunks * plan.width;
  int64_t rowRegisters = 0;
  for (const Value* in : plan.inputs) {
    plan.packed.push_back(plan.width % 4 == 0 && (in->type.dtype == DType::bf16 || in->type.dtype == DType::f16));
    rowRegisters += plan.packed.back() ? perThread / 2 : perThread;
  }
  if (perThread <= kMaxRowElementsPerThread && rowRegisters <= kMaxRowRegisters) {
    plan.chunks = chunks;
  } else if (sharedBudget > 0 && cols.empty()) {
    // Shared memory (sharedBudget: what the block may take; 0: not allowed). Chunks of whole
    // 16-byte words only.
    const int64_t block = std::max<int64_t>(kBlock, lanes);
    int64_t words = 0;
    bool whole = true;
    for (size_t k = 0; k < plan.inputs.size(); ++k) {
      const int64_t w = plan.packed[k] ? plan.width / 2 : plan.width;
      whole &= w % 4 == 0;
      int64_t stride = chunks * w;
      while (stride % 8 != 4) stride += 4;
      plan.offset.push_back(words);
      plan.stride.push_back(stride);
      words += block * stride;
    }
    if (whole && words * 4 <= sharedBudget) {
      plan.chunks = chunks;
      plan.shared = true;
      plan.sharedBytes = words * 4;
      plan.columnRegisters = false;
      return plan;  // no values kept for a later pass: the registers hold one chunk
    }
    plan.offset.clear(), plan.stride.clear();
    plan.vectorOuts.clear(), plan.rowConstants.clear();
  } else {
    plan.vectorOuts.clear(), plan.rowConstants.clear();  // the row is re-read in every pass, element by element
  }
  if (plan.chunks == 0) return plan;
  // Column sums' accumulators (one per element a thread holds) join the row in registers
  // while the arrays leave 48 of the 128 registers to the rest, else they live in shared
  // memory (see ColumnSums): at 96 (small's rmsnorm backward, 3 rows of 24 and the sums)
  // ptxas spilled.
  plan.columnRegisters = rowRegisters + perThread * int64_t(cols.size()) <= kMaxColumnRegisters;
  // The costly values each pass evaluates at its own element (reached from its root through
  // pointwise ops only, of the root's shape); those a later pass reaches again are cached
  // while the register budget lasts.
  // A pass per level (its reductions' operands), then the outputs' pass.
  std::vector<std::pair<std::vector<const Value*>, bool>> passRoots;  // roots, all of the full shape
  for (const auto& level : levels) {
    std::vector<const Value*> roots;
    bool whole = true;
    for (size_t i : level) {
      if (picked[i]) continue;  // read where it is picked, not in the pass
      roots.push_back(reds[i].op->operands[0]);
      whole &= reds[i].op->operands[0]->type.shape == full;
    }
    passRoots.push_back({roots, whole});
  }
  std::set<const Value*> reduced;
  for (const Reduction& red : reds) reduced.insert(red.op->result());
  std::vector<std::set<const Value*>> reach;
  auto walk = [&](std::vector<const Value*> stack, const Shape& shape) {
    std::set<const Value*> seen, costly;
    while (!stack.empty()) {
      const Value* v = stack.back();
      stack.pop_back();
      if (reduced.count(v) || v->type.shape != shape || !seen.insert(v).second) continue;
      const Op& op = *v->def;
      if (op.info().category != OpCategory::Pointwise || !hasScalarFormula(op.kind)) continue;
      // In its hardware form (exp over bf16 data: a multiply and ex2) recomputing costs less
      // than the registers: cross-entropy's cached exp held 24 of its 64.
      if (op.info().costly && !emitter.hardwareForm(v)) costly.insert(v);
      for (const Value* o : op.operands) stack.push_back(o);
    }
    return costly;
  };
  for (const auto& [roots, whole] : passRoots) {
    std::set<const Value*> costly;
    for (const Value* root : roots) {
      const std::set<const Value*> c = walk({root}, root->type.shape);
      costly.insert(c.begin(), c.end());
    }
    reach.push_back(costly);
  }
  std::vector<const Value*> outRoots;
  for (int o : fullOuts)
    if (body.outputs[size_t(o)]->type.shape == full) outRoots.push_back(body.outputs[size_t(o)]);
  for (const Op* c : cols)
    if (c->operands[0]->type.shape == full) outRoots.push_back(c->operands[0]);
  reach.push_back(walk(outRoots, full));
  int64_t used = rowRegisters + (plan.columnRegisters ? perThread * int64_t(cols.size()) : 0);
  std::set<const Value*> taken;
  for (size_t a = 0; a < reach.size(); ++a)
    for (const Value* v : reach[a]) {
      if (taken.count(v) || used + perThread > kMaxRowRegisters) continue;
      bool later = false;
      for (size_t b = a + 1; b < reach.size(); ++b) later |= reach[b].count(v) > 0;
      if (!later || (a < passRoots.size() && !passRoots[a].second)) continue;
      taken.insert(v);
      plan.cached.push_back({v, a});
      used += perThread;
    }
  return plan;
}

// ---- column sums in a row kernel ---------------------------------------------------------
// A row kernel may also reduce its elements down the rows (fusion/domain.h columnSums: the
// norm-weight gradient beside the rmsnorm backward, which reads the same dy and x). In the
// last pass each thread adds the elements it holds into per-column accumulators (registers,
// or shared memory when the row leaves no room): its columns are the same in every row it
// takes from a fixed grid. After its rows, a block combines its
// groups (warps) in group order through shared memory and writes its partial to a row of a
// module-scope scratch (kernel_abi.h). Blocks are counted in clusters: the last block of a
// cluster to finish adds that cluster's partials in block order, and the last cluster to
// finish adds the clusters' sums in cluster order, stores the result and resets the
// counters for the next launch. Every addition happens in an order fixed by the grid, not
// by which block finishes first, so the sums are the same bits run to run. Before, the
// column reduction was a kernel of its own that read dy and x again (split-reductions'
// first stage), then a second launch over the partials: 0.8 ms of small's step at batch 64.

struct ColumnSums {
  std::vector<const Op*> ops;
  int64_t width = 0;         // the columns (the row length r)
  int slots = 0;             // columns a thread holds
  bool slotted = false;      // row not in registers: slot c is inner c * L + lane
  int chunks = 0, vec = 1;   // register mode: slot c * V + j is inner (c * L + lane) * V + j
  int lanes = 32, blocks = 1, groupsPerBlock = 1, perCluster = 1, clusters = 1;
  // Accumulators in registers, or (when the row's registers leave no room: five inputs of
  // 1024 at 64 threads hold 80 already) in shared memory, [group][sum][slot][lane]: each thread owns its
  // entries, so no barrier, and a warp's accesses to one slot hit 32 banks.
  bool shared = false;
  // The accumulator of sum q at `slot`.
  std::string at(size_t q, const std::string& slot) const {
    if (!shared) return "cs" + std::to_string(q) + "[" + slot + "]";
    return "fusec_cs_acc[((threadIdx.x / " + std::to_string(lanes) + ") * " + std::to_string(ops.size() * slots) +
           " + " + std::to_string(q * size_t(slots)) + " + " + slot + ") * " + std::to_string(lanes) + " + lane]";
  }
};

// Room the column sums' shared accumulators leave for the block's other static arrays.
constexpr int64_t kOtherSharedBytes = 8 * 1024;

ColumnSums planColumnSums(const Graph& body, const std::vector<const Op*>& cols, int64_t n, int64_t r, int lanes,
                          const RowRegisters& regs, int blocks, int block, const Target& target) {
  for (const Op* c : cols)
    for (auto& op : body.ops)
      if (std::count(op->operands.begin(), op->operands.end(), c->result()))
        throw Error("codegen: kernel '" + body.name + "' reads its column sum " + c->result()->name +
                    " inside the kernel; it exists only after every block finished");
  ColumnSums cs;
  cs.ops = cols;
  cs.width = r;
  cs.lanes = lanes;
  cs.slotted = regs.chunks == 0;
  cs.chunks = int(regs.chunks);
  cs.vec = regs.width;
  cs.slots = cs.slotted ? int((r + lanes - 1) / lanes) : int(regs.chunks) * regs.width;
  if (cs.slots > 32)
    throw Error("codegen: kernel '" + body.name + "' sums " + std::to_string(r) + " columns over " +
                std::to_string(n) + " rows, more than " + std::to_string(32 * lanes) + " (32 per thread)");
  cs.blocks = blocks;
  cs.groupsPerBlock = block / lanes;
  // Rows re-read from memory leave the registers to the accumulators.
  const bool registers = cs.slotted ? cs.slots * int64_t(cols.size()) <= 32 : regs.columnRegisters;
  cs.shared = !registers &&
              int64_t(block) * cs.slots * int64_t(cols.size()) * 4 <= target.smemStaticPerBlock - kOtherSharedBytes;
  int perCluster = 1;
  while (perCluster * perCluster < blocks) ++perCluster;
  cs.perCluster = perCluster;
  cs.clusters = (blocks + perCluster - 1) / perCluster;
  return cs;
}

void writeColumnSumsScratch(KernelBuilder& w, const ColumnSums& cs) {
  const std::string kw = std::to_string(int64_t(cs.ops.size()) * cs.width);
  w.comment("Column sums across blocks: each block's partial, each cluster's sum, and the blocks (then");
  w.comment("clusters) finished so far, reset by the last one (kernel_abi.h: module-scope state).");
  w.memory(kir::Space::Device, "float", "fusec_cs_part", std::to_string(cs.blocks) + " * " + kw);
  w.memory(kir::Space::Device, "float", "fusec_cs_cluster", std::to_string(cs.clusters) + " * " + kw);
  w.memory(kir::Space::Device, "unsigned", "fusec_cs_count", std::to_string(cs.clusters + 1), "", "{0}");
}

// Calls `f(column, slot)` inside unrolled loops over the columns this thread holds.
void forEachSlot(BodyEmitter& e, const ColumnSums& cs, const std::function<void(const std::string&, const std::string&)>& f) {
  KernelBuilder& w = e.writer();
  const std::string L = std::to_string(cs.lanes), R = std::to_string(cs.width);
  if (cs.slotted) {
    e.openScope(kir::countedLoop("c", cs.slots, -1));
    w.let("fusec_idx", "col", "c * " + L + " + lane");
    e.openScope(kir::ifThen("col < " + R));
    f("col", "c");
    e.closeScope();
    e.closeScope();
    return;
  }
  const std::string V = std::to_string(cs.vec);
  e.openScope(kir::countedLoop("c", cs.chunks, -1));
  w.let("fusec_idx", "base", "(c * " + L + " + lane) * " + V);
  e.openScope(kir::ifThen("base < " + R));
  e.openScope(kir::countedLoop("j", cs.vec, -1));
  f("(base + j)", "c * " + V + " + j");
  e.closeScope();
  e.closeScope();
  e.closeScope();
}

// After the row loop: the block's partial, then the clusters' and the total (see above).
// Every step loads all the values it adds before adding them in order: a loop of dependent
// L2 loads (17 partials of a cluster, then 16 clusters) cost about 10 us a launch.
void emitColumnSumsFinish(BodyEmitter& e, const Graph& body, const ColumnSums& cs, const std::vector<int>& colOuts,
                          int64_t rows) {
  KernelBuilder& w = e.writer();
  const int64_t K = int64_t(cs.ops.size());
  const std::string W = std::to_string(cs.width), KW = std::to_string(K * cs.width), L = std::to_string(cs.lanes),
                    SL = std::to_string(int64_t(cs.slots) * cs.lanes), GPB = std::to_string(cs.groupsPerBlock);
  w.comment("column sums: this block's rows (its groups in order), then every block's");
  if (cs.groupsPerBlock > 1) {
    // The groups' accumulators side by side in shared memory ([group][slot][lane], as the
    // shared accumulators are; registers are staged there one sum at a time), then each
    // thread adds a column's groups in order.
    if (!cs.shared)
      w.memory(kir::Space::Shared, "float", "fusec_cs_stage", std::to_string(int64_t(cs.groupsPerBlock) * cs.slots * cs.lanes));
    const std::string col = cs.slotted ? "s * " + L + " + l"
                                       : "((s / " + std::to_string(cs.vec) + ") * " + L + " + l) * " +
                                             std::to_string(cs.vec) + " + s % " + std::to_string(cs.vec);
    for (size_t q = 0; q < cs.ops.size(); ++q) {
      std::string stride = std::to_string(cs.slots), base = "0", array = "fusec_cs_stage";
      if (cs.shared) {
        stride = std::to_string(K * cs.slots), base = std::to_string(q * size_t(cs.slots)), array = "fusec_cs_acc";
      } else {
        if (q > 0) w.barrier(kir::SyncScope::Block, "the previous sum's readers are done with the stage");
        w.openOneLine(kir::countedLoop("c", cs.slots, -1));
        w.store("fusec_cs_stage", "((threadIdx.x / " + L + ") * " + stride + " + c) * " + L + " + lane", cs.at(q, "c"));
        w.close();
      }
      w.barrier();
      e.openScope("for (int i = threadIdx.x; i < " + SL + "; i += blockDim.x)");
      w.line("const int s = i / " + L + ", l = i % " + L + ";");
      w.let("fusec_idx", "col", col);
      e.openScope(kir::ifThen("col < " + W));
      auto acc = [&](const std::string& g) {
        return array + "[((" + g + ") * " + stride + " + " + base + " + s) * " + L + " + l]";
      };
      w.var("float", "a", acc("0"));
      w.openOneLine(kir::countedLoopFrom("g", "1", GPB, -1));
      w.accumulate("a", combiner(cs.ops[q]->kind), acc("g"));
      w.close();
      w.store("fusec_cs_part", "blockIdx.x * " + KW + " + " + std::to_string(q) + " * " + W + " + col", "a");
      e.closeScope();
      e.closeScope();
    }
  } else {
    forEachSlot(e, cs, [&](const std::string& col, const std::string& slot) {
      for (size_t q = 0; q < cs.ops.size(); ++q)
        w.store("fusec_cs_part", "blockIdx.x * " + KW + " + " + std::to_string(q) + " * " + W + " + " + col, cs.at(q, slot));
    });
  }
  const std::string S = std::to_string(cs.perCluster), G = std::to_string(cs.blocks),
                    C = std::to_string(cs.clusters);
  // Adds `count` rows of `array` (`first` + b, b < count; those at or past `end` are absent)
  // for each column i of sum q this thread covers (i = threadIdx.x + k * block), then `use`s
  // the sum `a` at column i. The columns' loads go out together, up to 72 values a thread:
  // a loop over the columns that loaded one column's rows at a time waited for L2 once per
  // column (4 times at medium's 1,024 columns and 256 threads), at both levels, at the end of
  // every launch.
  const int block = cs.groupsPerBlock * cs.lanes;
  auto addRows = [&](size_t q, const std::string& array, const std::string& first, int count, const std::string& end,
                     const std::function<void()>& use) {
    const int64_t perThread = (cs.width + block - 1) / block;
    const int64_t together = std::clamp<int64_t>(72 / count, 1, perThread);
    const std::string N = std::to_string(count), T = std::to_string(together), BK = std::to_string(block);
    e.openScope("for (int k0 = 0; k0 < " + std::to_string(perThread) + "; k0 += " + T + ")");
    w.array("float", "v", T + "][" + N);
    e.openScope(kir::countedLoop("k", T, -1));
    w.let("int", "i", "threadIdx.x + (k0 + k) * " + BK);
    w.openOneLine(kir::countedLoop("b", N, -1));
    w.assign("v[k][b]", "i < " + W + " && " + first + " + b < " + end + " ? __ldcg(&" + array + "[(" + first + " + b) * " +
                            KW + " + " + std::to_string(q) + " * " + W + " + i]) : 0.0f");
    w.close();
    e.closeScope();
    e.openScope(kir::countedLoop("k", T, -1));
    w.let("int", "i", "threadIdx.x + (k0 + k) * " + BK);
    e.openScope(kir::ifThen("i < " + W));
    w.var("float", "a", "v[k][0]");
    w.openOneLine(kir::countedLoopFrom("b", "1", N, -1));
    w.openOneLine(kir::ifThen(first + " + b < " + end));
    w.accumulate("a", combiner(cs.ops[q]->kind), "v[k][b]");
    w.close();
    w.close();
    use();
    e.closeScope();
    e.closeScope();
    e.closeScope();
  };
  w.line("const int cluster = blockIdx.x / " + S + ", first = cluster * " + S + ", end = min(first + " + S + ", " + G +
         ");");
  w.arriveLast("fusec_cs_count[cluster]", "unsigned(end - first - 1)");
  for (size_t q = 0; q < cs.ops.size(); ++q)
    addRows(q, "fusec_cs_part", "first", cs.perCluster, "end", [&] {
      w.store("fusec_cs_cluster", "cluster * " + KW + " + " + std::to_string(q) + " * " + W + " + i", "a");
    });
  w.openOneLine(kir::ifThen("threadIdx.x == 0"));
  w.store("fusec_cs_count", "cluster", "0");
  w.close();
  w.arriveLast("fusec_cs_count[" + C + "]", C + "u - 1u");
  for (size_t q = 0; q < cs.ops.size(); ++q) {
    const Op& op = *cs.ops[q];
    addRows(q, "fusec_cs_cluster", "0", cs.clusters, C, [&] {
      if (op.kind == OpKind::Mean) w.assign("a", "a / " + literal(DType::f32, double(rows)));
      e.bindReduction(op.result(), "a");
      for (int o : colOuts)
        if (body.outputs[size_t(o)] == op.result())
          e.store(op.result(), "out" + std::to_string(o),
                  delinearize(w, IndexExpr::var("i", 0, cs.width - 1), op.result()->type.shape, e.fresh("c")));  // i < W
    });
  }
  w.openOneLine(kir::ifThen("threadIdx.x == 0"));
  w.store("fusec_cs_count", C, "0");
  w.close();
}

constexpr int64_t kMinColumnTiles = 128;
constexpr int64_t kRowStaticSharedBytes = 2 * 1024;  // a row kernel's static shared arrays (group parts, totals' stage)
constexpr int kStreamedRowUnroll = 8;  // openPass: passes over elements not held in registers (long rows, reduce_all)

// Columns per thread of a col_reduce (see the top): V when every reduction keeps the last
// axis, V divides it, there are at least kMinColumnTiles tiles of 32 x V, the accumulators
// are f32 (the shared tile of 8 x 32V stays small) and the kernel writes no full-shaped
// output; else 1. `vectors`: the inputs the lanes load as 16-byte vectors (the alignment
// test's pointers).

// `early`: full-shaped outputs written in the reductions' pass (ReductionEmitter::classify),
// stored V lanes at a time too when their last axis is the reduced input's (so lane j's element
// is column outer + j of one row) and their dtype is a float's.
int planColumns(const Graph& body, const std::vector<Reduction>& reds, bool fullOuts, const std::vector<const Value*>& early,
                std::vector<const Value*>& vectors) {
  if (fullOuts) return 1;
  std::vector<DType> dtypes;
  for (const Op* in : body.inputs())
    if (isFloat(in->result()->type.dtype) && in->result()->type.numel() > 1) dtypes.push_back(in->result()->type.dtype);
  const Shape& reduced = reds.at(0).op->operands[0]->type.shape;
  for (const Value* o : early) {
    if (!isFloat(o->type.dtype) || o->type.shape.empty() || o->type.shape.back() != reduced.back()) return 1;
    dtypes.push_back(o->type.dtype);
  }
  // Wider tiles mean fewer blocks: below kMinColumnTiles tiles a narrower V (or one column
  // per thread, 1024-thread tiles of 32) keeps more of the GPU busy. An unsplit norm-weight
  // gradient of medium at batch 4 (1,024 columns) ran as 4 tiles of 256 columns: 2 ms more
  // per step than with 32 tiles of 32.
  int v = vectorWidth(dtypes);
  const int64_t n = reds.at(0).n;
  while (v > 1 && n / (32 * v) < kMinColumnTiles) v /= 2;
  if (v <= 1) return 1;
  std::vector<const Value*> roots;
  for (const Reduction& red : reds) {
    if (!isFloat(red.op->result()->type.dtype) || red.reduced.empty() || red.reduced.back() != 1 ||
        red.kept.back() % v != 0)
      return 1;
    roots.push_back(red.op->operands[0]);
  }
  roots.insert(roots.end(), early.begin(), early.end());
  vectors = vectorInputs(body, roots, v);
  return v;
}

// Reduction levels: a reduction whose operand reads no other reduction of the kernel is on
// level 0, any other one level above the highest it reads. A level's reductions share one
// pass over the row and one group reduction (one pair of barriers): cross-entropy's max and
// its label's logit, then the sum of exp, where each had a pass and a block reduction.
std::vector<std::vector<size_t>> reductionLevels(const std::vector<Reduction>& reds) {
  std::map<const Value*, size_t> index;
  for (size_t i = 0; i < reds.size(); ++i) index[reds[i].op->result()] = i;
  std::vector<size_t> level(reds.size(), 0);
  std::vector<std::vector<size_t>> levels;
  for (size_t i = 0; i < reds.size(); ++i) {
    std::vector<const Value*> stack{reds[i].op->operands[0]};
    std::set<const Value*> seen;
    while (!stack.empty()) {
      const Value* v = stack.back();
      stack.pop_back();
      if (!seen.insert(v).second) continue;
      if (auto it = index.find(v); it != index.end()) {
        if (it->second >= i)
          throw Error("codegen: reduction '" + reds[i].op->result()->name + "' reads a reduction computed after it");
        level[i] = std::max(level[i], level[it->second] + 1);
        continue;
      }
      for (const Value* o : v->def->operands) stack.push_back(o);
    }
    if (levels.size() <= level[i]) levels.resize(level[i] + 1);
    levels[level[i]].push_back(i);
  }
  return levels;
}

// A sum over the row of select(iota == t, x, 0), t the same along the row (a broadcast of a
// row value): cross-entropy's target logit, as decompose writes it so that its gradient stays
// pointwise. Its value is the one element t selects, 0 + x[row, t] (the other terms are +0,
// so the sum is that bit for bit, a -0 turned +0 included), and 0 when t is outside the
// row. The kernel reads that element once per row instead of comparing, selecting and adding
// at every element: five instructions of the ~35 per logit of a kernel bound by its
// instructions. Returns {x, t} for such a reduction.
std::optional<std::pair<const Value*, const Value*>> pickedElement(const Reduction& red) {
  const Op& op = *red.op;
  const Shape& full = op.operands[0]->type.shape;
  if (op.kind != OpKind::Sum || full.empty() || !reducesSuffix(red)) return std::nullopt;
  const size_t last = full.size() - 1;
  for (size_t d = 0; d < last; ++d)
    if (red.reduced[d] != 1) return std::nullopt;  // the last axis alone
  const Op& sel = *op.operands[0]->def;
  if (sel.kind != OpKind::Select) return std::nullopt;
  const Op& zero = *sel.operands[2]->def;
  if (zero.kind != OpKind::Constant || zero.attrFloat("value") != 0.0 || !isFloat(sel.operands[1]->type.dtype) ||
      sel.operands[1]->type.shape != full)
    return std::nullopt;
  const Op& eq = *sel.operands[0]->def;
  if (eq.kind != OpKind::Eq) return std::nullopt;
  for (int k = 0; k < 2; ++k) {
    const Value* iota = eq.operands[size_t(k)];
    const Value* t = eq.operands[size_t(1 - k)];
    const bool alongRow = iota->def->kind == OpKind::Iota && iota->type.shape == full &&
                          normalizeAxis(iota->def->attrInt("axis"), int(full.size()), "iota") == int(last);
    const bool rowValue = t->def->kind == OpKind::Broadcast && t->type.shape == full &&
                          t->def->operands[0]->type.rank() == int(full.size()) &&
                          t->def->operands[0]->type.shape[last] == 1 && !isFloat(t->type.dtype);
    if (alongRow && rowValue) return std::make_pair(sel.operands[1], t);
  }
  return std::nullopt;
}

// A row kernel may also reduce its rows' values to one (fusion/domain.h rowTotals: the mean of
// cross-entropy's per-row losses, which was a launch of its own). Lane 0 of each row's group
// adds the row's value as it finishes the row (in its rows' order); after the rows, a block
// adds its groups' totals in group order and writes its partial; the last block to finish
// (counted, like the column sums) adds the partials with one warp, lane l taking blocks l,
// l + 32, ... in order and then a fixed butterfly, stores the value and resets the count. The
// order is fixed by the grid, so the value is the same bits run to run.
void writeRowTotalsScratch(KernelBuilder& w, size_t totals, int64_t blocks) {
  w.comment("Totals across blocks: each block's partial and the blocks finished so far, reset by the last.");
  w.memory(kir::Space::Device, "float", "fusec_rt_part", std::to_string(int64_t(totals) * blocks));
  w.memory(kir::Space::Device, "unsigned", "fusec_rt_count", "", "", "0");
}

void emitRowTotalsFinish(BodyEmitter& e, const Graph& body, const std::vector<const Op*>& totals,
                         const std::vector<int>& outs, int64_t blocks, int block, int lanes) {
  KernelBuilder& w = e.writer();
  const std::string G = std::to_string(blocks), GPB = std::to_string(block / lanes), L = std::to_string(lanes);
  w.comment("totals: this block's groups in order, then every block's");
  w.memory(kir::Space::Shared, "float", "fusec_rt_stage", std::to_string(int64_t(totals.size()) * (block / lanes)));
  e.openScope(kir::ifThen("lane == 0"));
  for (size_t q = 0; q < totals.size(); ++q)
    w.store("fusec_rt_stage", std::to_string(q) + " * " + GPB + " + threadIdx.x / " + L, "tot" + std::to_string(q));
  e.closeScope();
  w.barrier();
  e.openScope(kir::ifThen("threadIdx.x == 0"));
  for (size_t q = 0; q < totals.size(); ++q) {
    const std::string Q = std::to_string(q);
    w.var("float", "a" + Q, "fusec_rt_stage[" + Q + " * " + GPB + "]");
    w.openOneLine(kir::countedLoopFrom("g", "1", GPB, 0));
    w.accumulate("a" + Q, combiner(totals[q]->kind), "fusec_rt_stage[" + Q + " * " + GPB + " + g]");
    w.close();
    w.store("fusec_rt_part", Q + " * " + G + " + blockIdx.x", "a" + Q);
  }
  e.closeScope();
  w.arriveLast("fusec_rt_count", G + "u - 1u", "threadIdx.x >= 32");
  for (size_t q = 0; q < totals.size(); ++q) {
    const Op& t = *totals[q];
    const std::string Q = std::to_string(q), comb = std::string(combiner(t.kind)) + "()";
    e.openScope("");
    w.var("float", "a", initValue(t.kind, DType::f32));
    w.line("for (int b = threadIdx.x; b < " + G + "; b += 32) a = " + comb + "(a, __ldcg(&fusec_rt_part[" + Q + " * " + G +
           " + b]));");
    w.assign("a", "fusec_warp_reduce(a, " + comb + ")");
    std::string value = "a";
    if (t.kind == OpKind::Mean) value = "a / " + literal(DType::f32, double(t.operands[0]->type.numel()));
    const std::string reg = e.fresh("total");
    w.let("float", reg, value);
    e.bindReduction(t.result(), reg);
    for (int o : outs)
      if (body.outputs[size_t(o)] == t.result()) {
        e.openScope(kir::ifThen("threadIdx.x == 0"));
        e.store(t.result(), "out" + std::to_string(o), Index(t.result()->type.rank(), IndexExpr(0)));
        e.closeScope();
      }
    e.closeScope();
  }
  w.openOneLine(kir::ifThen("threadIdx.x == 0"));
  w.assign("fusec_rt_count", "0");
  w.close();
}

// Threads per row of a row kernel: a warp, doubled while a thread would hold more than 24
// of the row's elements, up to 512. Measured on an H200 (small bf16 b64, medium b16, per-launch
// sums): medium's rows of 1024 at 32 threads held three arrays of 32 registers, spilled, and put
// the weight-gradient accumulators in shared memory; at 64 its rmsnorm backward went from 1.607
// to 1.442 ms. Small's rows of 768 at 64 threads (the second chunk of 8 half empty) lost:
// backward 1.527 -> 1.630 ms, forward 1.134 -> 1.180.
int rowLanes(int64_t r) {
  int lanes = 32;
  while (lanes < 512 && r > int64_t(lanes) * 24) lanes *= 2;
  return lanes;
}

}  // namespace

std::string reductionPrelude() { return prelude(); }

namespace {

// One reduction kernel (row, column or whole-tensor) as it is written: what the body reduces
// and where its outputs go (classify), the launch shape and scratch (plan), then the kernel's
// text in order: the thread's place, the row in registers, one pass over the row per level of
// reductions, the row-shaped outputs, and the pass that writes the full-shaped outputs and
// the column sums. The members are what those steps share.
class ReductionEmitter {
 public:
  ReductionEmitter(const FamilyInput& k, KernelFamily family, KernelBuilder& w)
      : k_(k), w_(w), e_(k.body, w), rowKernel_(family == KernelFamily::RowReduce),
        columns_(family == KernelFamily::ColReduce) {}

  std::vector<Launch> emit() {
    classify();
    planLaunch();
    writePreamble();
    std::vector<std::string> pointers;  // a column tile's vector loads' (colV_ > 1)
    for (const Value* in : columnVectors_) pointers.push_back(inputPointer(k_.body, in));
    if (colV_ > 1)
      for (int o : earlyOuts_) pointers.push_back("out" + std::to_string(o));
    if (!pointers.empty()) {
      // Columns of V > 1 where every vector's pointer is aligned read 16-byte vectors
      // (codegen/lanes.h), else the same loop reads element by element: one uniform branch.
      e_.openScope(kir::ifThen(alignedTest(pointers)));
      writePoints(true);
      e_.closeScope();
      e_.openScope(kir::elseIf(""));
      writePoints(false);
      e_.closeScope();
    } else {
      writePoints(false);
    }
    if (!cols_.empty()) emitColumnSumsFinish(e_, k_.body, colSums_, colOuts_, n_);
    if (!totals_.empty()) emitRowTotalsFinish(e_, k_.body, totals_, totalOuts_, grid_, block_, lanes_);
    w_.close();
    return {Launch{k_.name, {uint32_t(grid_), 1, 1}, {uint32_t(block_), 1, 1}, uint32_t(regs_.sharedBytes)}};
  }

 private:
  // The loop over the thread's points and what it computes at each. `lanes`: a column tile
  // of V > 1 evaluates the body in vector-loop mode (BodyEmitter::beginLanes).
  void writePoints(bool lanes) {
    lanesMode_ = lanes;
    openOuterLoop();
    loadRowRegisters();
    for (size_t pass = 0; pass < levels_.size(); ++pass) writeLevel(pass);
    storeRowValues();
    if (!fullOuts_.empty() || !cols_.empty()) writeOutputPass();
    e_.closeScope();
  }

  // The body's reductions by role, checked, and its outputs by shape.
  void classify() {
    for (auto& op : k_.body.ops) {
      if (op->info().category != OpCategory::Reduction) continue;
      const fusion::DomainKind d = fusion::domainOf(*op).kind;
      if (rowKernel_ && d == fusion::DomainKind::Col) cols_.push_back(op.get());
      else if (rowKernel_ && d == fusion::DomainKind::All) totals_.push_back(op.get());
      else if (d != fusion::DomainKind::Pointwise) reds_.push_back(analyse(*op));
    }
    const Reduction& ref = reds_.at(0);
    n_ = ref.n;
    r_ = ref.r;
    for (const Reduction& red : reds_)
      if (red.n != n_ || red.r != r_)
        throw Error("codegen: kernel '" + k_.body.name + "' mixes reductions of " + std::to_string(n_) + "x" +
                    std::to_string(r_) + " and " + std::to_string(red.n) + "x" + std::to_string(red.r) + " elements");
    for (const Op* c : cols_) {
      const Reduction cr = analyse(*c);
      if (cr.n != r_ || cr.r != n_ || !reducesSuffix(ref) || !isFloat(c->result()->type.dtype))
        throw Error("codegen: kernel '" + k_.body.name + "' has a column reduction of " + std::to_string(cr.r) + "x" +
                    std::to_string(cr.n) + " elements that is not a float sum of its " + std::to_string(n_) +
                    " rows of " + std::to_string(r_));
    }
    if (!totals_.empty() && !cols_.empty())
      throw Error("codegen: kernel '" + k_.body.name + "' has both column sums and totals of its rows");
    for (const Op* t : totals_) {
      const Value* in = t->operands[0];
      const bool read = std::any_of(k_.body.ops.begin(), k_.body.ops.end(), [&](const auto& op) {
        return std::count(op->operands.begin(), op->operands.end(), t->result()) > 0;
      });
      if (in->type.numel() != n_ || !isFloat(t->result()->type.dtype) || read ||
          !std::count(k_.body.outputs.begin(), k_.body.outputs.end(), t->result()))
        throw Error("codegen: kernel '" + k_.body.name + "' has a total " + t->result()->name +
                    " that is not an output-only float reduction of one value per row");
    }
    for (size_t i = 0; i < k_.body.outputs.size(); ++i) {
      const int64_t c = k_.body.outputs[i]->type.numel();
      if (std::count(cols_.begin(), cols_.end(), k_.body.outputs[i]->def)) colOuts_.push_back(int(i));
      else if (std::count(totals_.begin(), totals_.end(), k_.body.outputs[i]->def)) totalOuts_.push_back(int(i));
      else if (c == n_) rowOuts_.push_back(int(i));
      else if (c == n_ * r_) fullOuts_.push_back(int(i));
      else
        throw Error("codegen: kernel '" + k_.body.name + "' output " + std::to_string(i) + " has " + std::to_string(c) +
                    " elements, neither " + std::to_string(n_) + " nor " + std::to_string(n_ * r_));
    }
    // A column kernel's full-shaped outputs that read none of its reductions (GELU's backward
    // beside its bias gradient) are written in the reductions' pass, which computes their
    // elements anyway: a last pass read the inputs and computed every element again.
    const auto readsReduction = [](const Value* v) {
      std::vector<const Value*> stack{v};
      std::set<const Value*> seen;
      while (!stack.empty()) {
        const Value* u = stack.back();
        stack.pop_back();
        if (!seen.insert(u).second) continue;
        if (u->def->info().category == OpCategory::Reduction) return true;
        for (const Value* o : u->def->operands) stack.push_back(o);
      }
      return false;
    };
    if (columns_ && std::none_of(fullOuts_.begin(), fullOuts_.end(),
                                 [&](int o) { return readsReduction(k_.body.outputs[size_t(o)]); }))
      earlyOuts_.swap(fullOuts_);
  }

  // Threads per point, block and grid; the row's registers; the scratch of column sums and totals.
  void planLaunch() {
    if (rowKernel_) {
      lanes_ = rowLanes(r_);
      block_ = std::max(kBlock, lanes_);
      grid_ = (n_ * lanes_ + block_ - 1) / block_;
    } else {
      lanes_ = block_ = 1024;
    }
    std::vector<const Value*> early;
    for (int o : earlyOuts_) early.push_back(k_.body.outputs[size_t(o)]);
    colV_ = columns_ ? planColumns(k_.body, reds_, !fullOuts_.empty(), early, columnVectors_) : 1;
    if (columns_) {
      // V > 1: 8 row lanes (256 threads) rather than 32. A 1024-thread block of V-wide tiles
      // held one block per multiprocessor (registers and the 32 KB lane tile), and the
      // split-reduction partials' 192 tiles ran as two uneven waves at 50% of DRAM bandwidth.
      block_ = colV_ > 1 ? 256 : 1024;
      lanes_ = block_ / 32;  // row lanes: thread t takes every lanes_-th row from t / 32
      grid_ = (n_ + 32 * colV_ - 1) / (32 * colV_);
    }
    grid_ = std::clamp<int64_t>(grid_, 1, 65535);
    levels_ = reductionLevels(reds_);
    // Row sums that pick one element (pickedElement): no pass over the row, no group reduction.
    picks_.assign(reds_.size(), std::nullopt);
    picked_.assign(reds_.size(), false);
    if (rowKernel_)
      for (size_t i = 0; i < reds_.size(); ++i) picked_[i] = (picks_[i] = pickedElement(reds_[i])).has_value();
    // Shared memory for a row too long for registers (Target::rowShared): what two blocks an
    // SM leave a block, less the static arrays' room.
    const int64_t sharedBudget =
        k_.target.rowShared ? std::min(k_.target.smemPerBlock, k_.target.smemPerSm / 2 - k_.target.smemReservedPerBlock) -
                                  kRowStaticSharedBytes
                            : 0;
    if (rowKernel_) regs_ = planRow(k_.body, reds_, levels_, picked_, fullOuts_, cols_, lanes_, e_, sharedBudget);
    // A staged row's blocks: as many as the multiprocessors hold at once (its rows loop).
    if (regs_.shared)
      grid_ = std::min<int64_t>(grid_, int64_t(k_.target.sms) *
                                           std::max<int64_t>(1, k_.target.smemPerSm / (regs_.sharedBytes + kRowStaticSharedBytes +
                                                                                        k_.target.smemReservedPerBlock)));
    // Column sums whose accumulators fit neither beside the row's registers nor in shared
    // memory spilled (GPT-2's layernorm backward: three sums of 24 columns a thread beside
    // three inputs, 300 bytes of spill stores a thread at 128 registers). Twice the threads a
    // row halve every array a thread holds, the sums' and the row's.
    while (rowKernel_ && !cols_.empty() && regs_.chunks > 0 && !regs_.columnRegisters && lanes_ < 512 &&
           int64_t(std::max(kBlock, lanes_)) * regs_.chunks * regs_.width * int64_t(cols_.size()) * 4 >
               k_.target.smemStaticPerBlock - kOtherSharedBytes) {
      lanes_ *= 2;
      block_ = std::max(kBlock, lanes_);
      grid_ = std::clamp<int64_t>((n_ * lanes_ + block_ - 1) / block_, 1, 65535);
      regs_ = planRow(k_.body, reds_, levels_, picked_, fullOuts_, cols_, lanes_, e_);
    }
    // Column sums: a fixed grid of at most two blocks per SM (each block's partial is one row
    // of the scratch the last blocks add up).
    // Totals: a fixed grid of at most the blocks the device holds at once (its threads an SM),
    // whose partials one warp of the last block adds; rows beyond it loop.
    if (!totals_.empty()) {
      grid_ = std::min<int64_t>(grid_, int64_t(k_.target.sms) * std::max(1, k_.target.threadsPerSm / block_));
      writeRowTotalsScratch(w_, totals_.size(), grid_);
    }
    if (!cols_.empty()) {
      grid_ = std::min<int64_t>(grid_, 2 * int64_t(k_.target.sms));
      colSums_ = planColumnSums(k_.body, cols_, n_, r_, lanes_, regs_, int(grid_), block_, k_.target);
      writeColumnSumsScratch(w_, colSums_);
    }
    L_ = std::to_string(lanes_);
    V_ = std::to_string(regs_.width);
    R_ = std::to_string(r_);
  }

  // The signature, the thread's point (group) and lane, and the pointers the vector paths test.
  void writePreamble() {
    // Row kernels of up to 512 threads ask for two blocks per SM, which caps them at 128 (64)
    // registers against ptxas's default 255. Measured on small bf16 b64's train step (H200,
    // per-launch sums): rmsnorm forward 1.207 -> 1.127 ms, its backward (rowsum) 1.381 ->
    // 1.346, cross-entropy unchanged (0.430 -> 0.433: it took 64 already). Asking for 3 or 4
    // blocks made the backward spill (1.58 and 2.17 ms). With bf16 rows packed, three blocks
    // of medium's backward (rows of 1,024 at 64 threads, 80 registers, no spill) still lost
    // to two (1.374 -> 1.510 ms).
    const int minBlocks = rowKernel_ && block_ <= 512 ? 2 : 0;
    k_.signature(w_, k_.name, block_, minBlocks);
    if (columns_ && colV_ > 1)
      w_.comment(std::to_string(n_) + " points of " + R_ + " reduced elements, " + L_ +
                 " row lanes per point, " + std::to_string(colV_) + " points per thread");
    else
      w_.comment(std::to_string(n_) + " points of " + R_ + " reduced elements, " + L_ + " thread(s) per point");
    const std::string CV = std::to_string(colV_), tileWidth = std::to_string(32 * colV_);
    if (columns_ && colV_ > 1) {
      w_.let("fusec_idx", "lane", "threadIdx.x / 32", "the row lane; threadIdx.x % 32 owns " + CV + " adjacent columns of the tile");
      w_.let("fusec_idx", "group", "(fusec_idx)blockIdx.x * " + tileWidth, "the tile's first column");
      w_.let("fusec_idx", "groups", "(fusec_idx)gridDim.x * " + tileWidth);
    } else if (columns_) {
      w_.let("fusec_idx", "lane", "threadIdx.x / 32", "the row lane; threadIdx.x % 32 is the tile's column");
      w_.let("fusec_idx", "group", "(fusec_idx)blockIdx.x * 32", "the tile's first column");
      w_.let("fusec_idx", "groups", "(fusec_idx)gridDim.x * 32");
    } else {
      w_.let("fusec_idx", "lane", "threadIdx.x % " + L_);
      w_.let("fusec_idx", "group", "((fusec_idx)blockIdx.x * blockDim.x + threadIdx.x) / " + L_);
      w_.let("fusec_idx", "groups", "(fusec_idx)gridDim.x * blockDim.x / " + L_);
    }
    for (const Value* in : regs_.inputs) vectorPointers_.push_back(inputPointer(k_.body, in));
    for (int o : regs_.vectorOuts) vectorPointers_.push_back("out" + std::to_string(o));
    for (const Value* in : regs_.rowConstants) rowConstantPointers_.push_back(inputPointer(k_.body, in));
    vectorPointers_.insert(vectorPointers_.end(), rowConstantPointers_.begin(), rowConstantPointers_.end());
    if (regs_.chunks > 0 && regs_.width > 1) w_.let("bool", "aligned", alignedTest(vectorPointers_));
  }

  // The loop over the thread's points, and before it the column sums' and totals' accumulators.
  void openOuterLoop() {
    const std::string N = std::to_string(n_);
    if (columns_) {
      // The tile loop's trip count is the same for the whole block (fusec_col_reduce syncs);
      // columns past the end only skip their loads and stores.
      e_.openScope(kir::stridedLoop("tile", "group", N, "groups"));
      if (colV_ > 1)  // V adjacent columns: outer + j, j < V (V divides the kept last axis)
        w_.let("fusec_idx", "outer", "tile + (threadIdx.x % 32) * " + std::to_string(colV_), "the first of this thread's columns");
      else
        w_.let("fusec_idx", "outer", "tile + threadIdx.x % 32");
      w_.let("bool", "live", "outer < " + N);
      return;
    }
    const std::string C = std::to_string(colSums_.slots);
    if (colSums_.shared && !cols_.empty())
      w_.memory(kir::Space::Shared, "float", "fusec_cs_acc", std::to_string(block_ * colSums_.slots * int64_t(cols_.size())),
                "the column sums' accumulators, [group][sum][slot][lane]");
    for (size_t q = 0; q < cols_.size(); ++q) {
      w_.comment(e_.describe(*cols_[q]) + ": this thread's columns");
      if (!colSums_.shared) w_.array("float", "cs" + std::to_string(q), C);
      w_.openOneLine(kir::countedLoop("c", C, -1));
      w_.assign(colSums_.at(q, "c"), initValue(cols_[q]->kind, DType::f32));
      w_.close();
    }
    for (size_t q = 0; q < totals_.size(); ++q) {
      w_.comment(e_.describe(*totals_[q]) + ": this group's rows (lane 0)");
      w_.var("float", "tot" + std::to_string(q), initValue(totals_[q]->kind, DType::f32));
    }
    e_.openScope(kir::stridedLoop("outer", "group", N, "groups"));
  }

  // The loop counters as index expressions with the values their loops give them, so that
  // the simplifier can fold what a body's reshapes divide them by (codegen/index_expr.h).
  // `outer` lies in [0, n) where its loop bounds it; a column tile's runs past the last
  // column (those threads only skip their memory accesses), so it claims no range there.
  // `inner` lies in [0, r) in every pass: its loop tests it, or (a row in registers) it is
  // base + j with base < r a multiple of the width, which divides r.
  IndexExpr outerVar() const { return columns_ ? IndexExpr::var("outer") : IndexExpr::var("outer", 0, n_ - 1); }
  IndexExpr innerVar() const { return IndexExpr::var("inner", 0, r_ - 1); }

  // Whether a pass evaluating `roots` reads body value `v` (reductions are registers by then).
  static bool reads(std::vector<const Value*> stack, const Value* v) {
    std::set<const Value*> seen;
    while (!stack.empty()) {
      const Value* u = stack.back();
      stack.pop_back();
      if (u == v) return true;
      if (!seen.insert(u).second || u->def->info().category == OpCategory::Reduction) continue;
      for (const Value* o : u->def->operands) stack.push_back(o);
    }
    return false;
  }

  // In register mode a pass is two unrolled loops (chunks, then the elements of a chunk);
  // `inner` is then the element's position in the row. Returns the scopes to close.
  // `roots`: the values the pass evaluates.
  int openPass(const std::vector<const Value*>& roots) {
    if (regs_.chunks == 0) {
      // Columns: a few rows' loads in flight per thread (the loop is short and its only
      // dependency is the accumulator). A row too long for registers (cross-entropy over a
      // 50,304-token vocabulary: 98 elements a thread of 512) streams in every pass: 8
      // loads in flight per thread, where the compiler's own unrolling by 4 left a 16-bit
      // load's 64 bytes a warp too few to cover DRAM latency (GPT-2's cross-entropy at 35%
      // of the copy bandwidth).
      e_.openScope(kir::stridedLoop("inner", "lane", R_, L_, columns_ ? "live" : "", columns_ ? 4 : kStreamedRowUnroll));
      return 1;
    }
    e_.openScope(kir::countedLoop("c", regs_.chunks, -1));
    w_.let("fusec_idx", "base", "(c * " + L_ + " + lane) * " + V_);
    e_.openScope(kir::ifThen("base < " + R_));
    if (regs_.shared)  // this chunk of each input the pass reads, from the thread's slices
      for (size_t a = 0; a < regs_.inputs.size(); ++a) {
        if (!reads(roots, regs_.inputs[a])) continue;
        const std::string W = std::to_string(regs_.chunkWords(a));
        w_.array(regs_.packed[a] ? "unsigned" : "float", "r" + std::to_string(a), regs_.packed[a] ? W : V_);
        w_.line("fusec_words_get<" + W + ">(r" + std::to_string(a) + ", " + sliceOf(a) + ");");
      }
    for (size_t a = 0; a < regs_.rowConstants.size(); ++a) {
      if (!reads(roots, regs_.rowConstants[a])) continue;
      const std::string b = "b" + std::to_string(a), p = rowConstantPointers_[a];
      w_.array("float", b, V_, e_.describe(*regs_.rowConstants[a]->def) + ", this chunk's elements");
      w_.use(Helper::VectorIO);
      w_.line("if (aligned) fusec_vload<" + V_ + ">(" + b + ", " + p + " + base);");
      e_.openScope(kir::elseIf(""));
      w_.openOneLine(kir::countedLoop("j", V_, -1));
      w_.assign(b + "[j]", "fusec_f32(" + p + "[base + j])");
      w_.close();
      e_.closeScope();
    }
    e_.openScope(kir::countedLoop("j", regs_.width, -1));
    w_.let("fusec_idx", "inner", "base + j");
    return 3;
  }
  void closePass(int scopes) {
    for (int i = 0; i < scopes; ++i) e_.closeScope();
  }

  // The elements of the current pass come from the registers (keyed by the position at
  // which the body reads them in `shape`).
  // Cached values computed by an earlier pass (`pass`: the current one) come from theirs.
  void bindRow(const Index& idx, const Shape& shape, size_t pass) {
    const std::string at = regs_.shared ? "j" : "c * " + V_ + " + j";  // shared: r<a> holds the chunk
    for (size_t a = 0; a < regs_.inputs.size(); ++a)
      e_.bindElement(regs_.inputs[a], linearize(idx, shape),
                     regs_.packed[a] ? "fusec_elem(r" + std::to_string(a) + ", " + at + ", " + vectorPointers_[a] + ")"
                                     : "r" + std::to_string(a) + "[" + at + "]");
    // A broadcast reads the last coordinate (codegen/body_emitter.cpp layoutOperandIndex).
    for (size_t a = 0; a < regs_.rowConstants.size(); ++a)
      e_.bindElement(regs_.rowConstants[a], linearize({idx.back()}, regs_.rowConstants[a]->type.shape),
                     "b" + std::to_string(a) + "[j]");
    for (size_t a = 0; a < regs_.cached.size(); ++a)
      if (regs_.cached[a].second < pass)
        e_.bindElement(regs_.cached[a].first, linearize(idx, shape), "k" + std::to_string(a) + "[c * " + V_ + " + j]");
  }
  // After pass `pass` evaluated its element: keep the values it caches.
  void keepRow(const Index& idx, size_t pass) {
    for (size_t a = 0; a < regs_.cached.size(); ++a)
      if (regs_.cached[a].second == pass)
        w_.assign("k" + std::to_string(a) + "[c * " + V_ + " + j]", e_.eval(regs_.cached[a].first, idx));
  }

  // Thread's slice of input a's staged row, at chunk c (RowRegisters::shared).
  std::string sliceOf(size_t a) const {
    return "fusec_row_smem + " + std::to_string(regs_.offset[a]) + " + threadIdx.x * " + std::to_string(regs_.stride[a]) +
           " + c * " + std::to_string(regs_.chunkWords(a));
  }

  // The row in registers (when planRow chose it): loaded once, vectors where aligned. A row
  // staged in shared memory (RowRegisters::shared) is loaded the same way, a chunk at a time
  // into a chunk-sized r<a>, which then goes to the thread's slice.
  void loadRowRegisters() {
    if (regs_.chunks == 0) return;
    const bool shared = regs_.shared;
    const std::string E = std::to_string(regs_.chunks * regs_.width);
    const std::string P = std::to_string(regs_.chunks * regs_.width / 2), H = std::to_string(regs_.width / 2);
    // Element j of chunk c, and the chunk's first register, in r<a>.
    const std::string at = shared ? "j" : "c * " + V_ + " + j", first = shared ? "" : " + c * ";
    if (shared) {
      w_.comment("the row in shared memory: " + std::to_string(regs_.chunks) + " chunk(s) of " + V_ +
                 " consecutive elements per thread, loaded once, each thread's in its own slice");
      w_.use(Helper::RowShared);
      w_.line("extern __shared__ uint4 fusec_row_smem4[];");
      w_.line("unsigned* const fusec_row_smem = reinterpret_cast<unsigned*>(fusec_row_smem4);");
    } else {
      w_.comment("the row in registers: " + std::to_string(regs_.chunks) + " chunk(s) of " + V_ +
                 " consecutive elements per thread, loaded once");
      for (size_t a = 0; a < regs_.inputs.size(); ++a)
        w_.array(regs_.packed[a] ? "unsigned" : "float", "r" + std::to_string(a), regs_.packed[a] ? P : E,
                 regs_.packed[a] ? "16-bit pairs" : "");
      for (size_t a = 0; a < regs_.cached.size(); ++a)
        w_.array("float", "k" + std::to_string(a), E, e_.describe(*regs_.cached[a].first->def) + ", kept for a later pass");
    }
    // Staged: four chunks' loads in flight a thread (2 KB a warp, 32 KB a block of 512) cover
    // the memory's latency; all of them (13 at GPT-2's vocabulary) spilled at 64 registers.
    e_.openScope(kir::countedLoop("c", regs_.chunks, shared ? 4 : -1));
    w_.let("fusec_idx", "base", "(c * " + L_ + " + lane) * " + V_);
    e_.openScope(kir::ifThen("base < " + R_));
    if (shared)
      for (size_t a = 0; a < regs_.inputs.size(); ++a)
        w_.array(regs_.packed[a] ? "unsigned" : "float", "r" + std::to_string(a),
                 regs_.packed[a] ? std::to_string(regs_.chunkWords(a)) : V_);
    auto scalarLoads = [&] {
      e_.openScope(kir::countedLoop("j", regs_.width, -1));
      for (size_t a = 0; a < regs_.inputs.size(); ++a) {
        const std::string p = vectorPointers_[a], from = "outer * " + R_ + " + base + j";
        if (regs_.packed[a]) {  // pairs: j even
          w_.openOneLine(kir::ifThen("j % 2 == 0"));
          w_.assign("r" + std::to_string(a) + "[(" + at + ") / 2]",
                    "fusec_pack_raw(" + p + "[" + from + "], " + p + "[" + from + " + 1])");
          w_.close();
        } else {
          w_.assign("r" + std::to_string(a) + "[" + at + "]", loadExpr(regs_.inputs[a]->type.dtype, p, from));
        }
      }
      e_.closeScope();
    };
    if (regs_.width > 1) {
      e_.openScope(kir::ifThen("aligned"));
      w_.use(Helper::VectorIO);
      for (size_t a = 0; a < regs_.inputs.size(); ++a)
        w_.line((regs_.packed[a] ? "fusec_vload_packed<" + V_ + ">(r" + std::to_string(a) + (shared ? "" : first + H)
                                 : "fusec_vload<" + V_ + ">(r" + std::to_string(a) + (shared ? "" : first + V_)) +
                ", " + vectorPointers_[a] + " + outer * " + R_ + " + base);");
      e_.closeScope();
      e_.openScope(kir::elseIf(""));
      scalarLoads();
      e_.closeScope();
    } else {
      scalarLoads();
    }
    if (shared)
      for (size_t a = 0; a < regs_.inputs.size(); ++a)
        w_.line("fusec_words_put<" + std::to_string(regs_.chunkWords(a)) + ">(" + sliceOf(a) + ", r" + std::to_string(a) + ");");
    e_.closeScope();
    e_.closeScope();
  }


  // Who combines a level's accumulators (see reductionLevels); a group of warps first stages
  // each warp's value in shared memory behind the group's barrier.
  kir::ReduceScope groupReduce(const std::vector<std::pair<std::string, const Op*>>& accs) {
    if (lanes_ == 1) return kir::ReduceScope::Thread;
    if (columns_) return kir::ReduceScope::ColumnTile;
    if (lanes_ == 32) return kir::ReduceScope::Warp;
    for (const auto& [acc, op] : accs)
      w_.memory(kir::Space::Shared, registerType(op->result()->type.dtype), "fusec_part_" + acc, std::to_string(block_ / 32));
    // One level: the next point's writes wait for this point's readers. With more, another
    // level's barriers stand between a level's reads and its next writes.
    if (levels_.size() == 1)
      w_.groupBarrier(lanes_, block_, "the previous point's readers are done with the parts");
    for (const auto& [acc, op] : accs)
      w_.line("fusec_warp_part(" + acc + ", " + combiner(op->kind) + "(), fusec_part_" + acc + ");");
    w_.groupBarrier(lanes_, block_);
    return kir::ReduceScope::WarpGroup;
  }

  // A row sum that selects one element (pickedElement): that element, read once.
  void writePicked(size_t i) {
    const auto [x, t] = *picks_[i];
    const Reduction& red = reds_[i];
    const std::string acc = e_.fresh("acc"), at = e_.fresh("pick");
    w_.comment(e_.describe(*red.op) + ": the element " + e_.describe(*t->def) + " selects, read once");
    w_.var("float", acc, "0.0f");
    Index idx = fullIndex(w_, red, delinearize(w_, outerVar(), red.kept, e_.fresh("k")), IndexExpr(0), e_.fresh("e"));
    w_.let("long long", at, "(long long)" + e_.eval(t, idx));
    e_.openScope(kir::ifThen(at + " >= 0 && " + at + " < " + std::to_string(red.r)));
    idx.back() = IndexExpr::var("(fusec_idx)" + at, 0, red.r - 1);  // in range: the test above
    w_.assign(acc, "0.0f + (float)" + e_.eval(x, idx));
    e_.closeScope();
    e_.bindReduction(red.op->result(), acc);
  }

  // One level of reductions: one pass over the row accumulating each, then the group's totals.
  void writeLevel(size_t pass) {
    std::vector<std::pair<std::string, const Op*>> accs;
    std::vector<Index> kept;
    std::vector<size_t> summed;  // the level's reductions that take a pass over the row
    for (size_t i : levels_[pass]) {
      if (picked_[i]) {
        writePicked(i);
        continue;
      }
      summed.push_back(i);
      const Op& op = *reds_[i].op;
      const DType dt = op.result()->type.dtype;
      accs.push_back({e_.fresh("acc"), &op});
      w_.comment(e_.describe(op));
      if (colV_ > 1) {  // one accumulator per column of the thread's V
        const std::string& acc = accs.back().first;
        w_.array("float", acc, std::to_string(colV_));
        w_.openOneLine(kir::countedLoop("j", colV_, -1));
        w_.assign(acc + "[j]", initValue(op.kind, dt));
        w_.close();
      } else {
        w_.var(registerType(dt), accs.back().first, initValue(op.kind, dt));
      }
      kept.push_back(delinearize(w_, outerVar(), reds_[i].kept, e_.fresh("k")));
    }
    if (summed.empty()) return;
    std::vector<const Value*> passRoots;
    for (size_t i : summed) passRoots.push_back(reds_[i].op->operands[0]);
    const std::vector<int> early = pass == 0 ? earlyOuts_ : std::vector<int>{};
    for (int o : early) passRoots.push_back(k_.body.outputs[size_t(o)]);
    const int scopes = openPass(passRoots);
    std::optional<Index> first;
    std::vector<ColumnTerm> terms;
    for (size_t a = 0; a < accs.size(); ++a) {
      const Reduction& red = reds_[summed[a]];
      const Op& op = *red.op;
      const Index idx = fullIndex(w_, red, kept[a], innerVar(), e_.fresh("e"));
      if (!first) first = idx;
      if (regs_.chunks) bindRow(idx, op.operands[0]->type.shape, pass);
      const std::string& acc = accs[a].first;
      const std::string cast = "(" + registerType(op.result()->type.dtype) + ")";
      if (colV_ > 1) terms.push_back({acc, &op, idx, cast});
      else w_.accumulate(acc, combiner(op.kind), cast + e_.eval(op.operands[0], idx));
    }
    if (colV_ > 1) {
      accumulateColumns(terms, early);
    } else {
      const Shape& s = reds_[summed[0]].op->operands[0]->type.shape;
      for (int o : early) {
        const Value* v = k_.body.outputs[size_t(o)];
        e_.store(v, "out" + std::to_string(o), outputIndex(v, *first, s));
      }
    }
    if (regs_.chunks) keepRow(*first, pass);
    closePass(scopes);
    if (colV_ > 1) return reduceColumns(accs);
    const kir::ReduceScope scope = groupReduce(accs);
    for (const auto& [acc, op] : accs) {
      const std::string reg = e_.fresh("red");
      // Kept in f32 like every intermediate; a bf16 result is rounded where it is stored.
      w_.reduce(registerType(op->result()->type.dtype), reg, scope, combiner(op->kind), acc, lanes_,
                op->kind == OpKind::Mean ? literal(DType::f32, double(r_)) : "");
      e_.bindReduction(op->result(), reg);
    }
  }

  // The element of full-shaped output `v` at the reduced input's index `full` (shape `s`): the
  // same index where the shapes agree; else through the row-major position, keeping the last
  // coordinate itself where the last axes agree (planColumns: so a vector lane's column is
  // visibly lane 0's plus j).
  Index outputIndex(const Value* v, const Index& full, const Shape& s) {
    const Shape& vs = v->type.shape;
    if (vs == s) return full;
    if (vs.empty() || s.empty() || vs.back() != s.back())
      return delinearize(w_, linearize(full, s), vs, e_.fresh("g"));
    const Index rows(full.begin(), full.end() - 1);
    Index idx = delinearize(w_, linearize(rows, Shape(s.begin(), s.end() - 1)), Shape(vs.begin(), vs.end() - 1), e_.fresh("g"));
    idx.push_back(full.back());
    return idx;
  }

  // One reduction's element in a column tile of V > 1: its accumulator, the reduction, lane
  // 0's index (the first column's) and the cast to the accumulator's type.
  struct ColumnTerm {
    std::string acc;
    const Op* op;
    Index idx;
    std::string cast;
  };
  // Column tiles of V > 1: each term's element added to the accumulator of each of the
  // thread's columns, and the `early` outputs' elements stored (16-byte vectors in vector-loop
  // mode), in one loop over the columns (vector-loop mode where the pointers are aligned:
  // writePoints), so what the sums and the outputs share is computed once.
  void accumulateColumns(const std::vector<ColumnTerm>& terms, const std::vector<int>& early) {
    const IndexExpr j = IndexExpr::var("j", 0, colV_ - 1);
    const Shape& s = terms.at(0).op->operands[0]->type.shape;
    const std::string V = std::to_string(colV_);
    std::vector<Index> firsts;  // each early output's lane 0 index, computed before the loop
    for (int o : early) {
      firsts.push_back(outputIndex(k_.body.outputs[size_t(o)], terms.at(0).idx, s));
      if (lanesMode_) w_.array("float", "s" + std::to_string(o), V);
    }
    // The lane loop's hoisted declarations go here, after the registers they may read.
    const KernelBuilder::Mark declarations = w_.mark();
    if (lanesMode_) e_.beginLanes(colV_, "j");
    e_.openScope(lanesMode_ ? kir::laneLoop("j", colV_) : kir::countedLoop("j", colV_, -1));
    for (const ColumnTerm& t : terms) {
      Index idx = t.idx;
      idx.back() = idx.back() + j;
      const Value* x = t.op->operands[0];
      w_.accumulate(t.acc + "[j]", combiner(t.op->kind), t.cast + (lanesMode_ ? e_.evalLanes(x, idx, t.idx) : e_.eval(x, idx)));
    }
    for (size_t k = 0; k < early.size(); ++k) {
      const Value* v = k_.body.outputs[size_t(early[k])];
      Index idx = firsts[k];
      idx.back() = idx.back() + j;
      if (lanesMode_) w_.assign("s" + std::to_string(early[k]) + "[j]", e_.evalLanes(e_.storedForm(v), idx, firsts[k]));
      else e_.store(v, "out" + std::to_string(early[k]), idx);
    }
    e_.closeScope();
    if (lanesMode_) {
      w_.insert(declarations, e_.takeDeclarations());
      e_.endLanes();
      if (!early.empty()) w_.use(Helper::VectorIO);
      for (size_t k = 0; k < early.size(); ++k) {
        const Value* v = k_.body.outputs[size_t(early[k])];
        w_.store("out" + std::to_string(early[k]), linearize(firsts[k], v->type.shape).str(), "s" + std::to_string(early[k]), colV_);
      }
    }
  }
  // The row lanes of a column tile of V > 1 combined in place, each column's in lane order
  // (fusec_col_reduce_v); the values are read as acc[j] inside a loop over the columns.
  void reduceColumns(const std::vector<std::pair<std::string, const Op*>>& accs) {
    const std::string V = std::to_string(colV_);
    for (const auto& [acc, op] : accs) {
      w_.line("fusec_col_reduce_v<" + V + ", " + L_ + ">(" + acc + ", " + combiner(op->kind) + "());");
      if (op->kind == OpKind::Mean) {
        w_.openOneLine(kir::countedLoop("j", V, -1));
        w_.assign(acc + "[j]", acc + "[j] / " + literal(DType::f32, double(r_)));
        w_.close();
      }
      e_.bindReduction(op->result(), acc + "[j]");
    }
  }

  // Lane 0 stores the point's row-shaped outputs (a column tile's V of them in a loop) and
  // adds its value to the totals.
  void storeRowValues() {
    if (rowOuts_.empty() && totals_.empty()) return;
    e_.openScope(kir::ifThen(columns_ ? "lane == 0 && live" : "lane == 0"));
    if (colV_ > 1) e_.openScope(kir::countedLoop("j", colV_, -1));
    for (int o : rowOuts_) {
      const Value* v = k_.body.outputs[size_t(o)];
      const IndexExpr point = colV_ > 1 ? outerVar() + IndexExpr::var("j", 0, colV_ - 1) : outerVar();
      e_.store(v, "out" + std::to_string(o), delinearize(w_, point, v->type.shape, "q" + std::to_string(o)));
    }
    if (colV_ > 1) e_.closeScope();
    for (size_t q = 0; q < totals_.size(); ++q) {
      const Value* in = totals_[q]->operands[0];
      const std::string acc = "tot" + std::to_string(q);
      w_.accumulate(acc, combiner(totals_[q]->kind),
                    "(float)" + e_.eval(in, delinearize(w_, outerVar(), in->type.shape, e_.fresh("t"))));
    }
    e_.closeScope();
  }

  // The last pass over the row: the full-shaped outputs (a chunk stored whole where the row is
  // in registers) and the column sums' accumulators.
  void writeOutputPass() {
    const Reduction& ref = reds_.at(0);
    Index kept = delinearize(w_, outerVar(), ref.kept, e_.fresh("k"));
    const size_t outputPass = levels_.size();
    for (int o : regs_.vectorOuts) w_.array("float", "s" + std::to_string(o), V_);
    // With column sums and the row not in registers, the pass is unrolled over a thread's
    // columns (slot c: inner c * L + lane) so that their accumulators stay in registers.
    int scopes = 0;
    if (colSums_.slotted && !cols_.empty()) {
      e_.openScope(kir::countedLoop("c", colSums_.slots, -1));
      w_.let("fusec_idx", "inner", "c * " + L_ + " + lane");
      e_.openScope(kir::ifThen("inner < " + R_));
      scopes = 2;
    } else {
      std::vector<const Value*> passRoots;
      for (int o : fullOuts_) passRoots.push_back(k_.body.outputs[size_t(o)]);
      for (const Op* c : cols_) passRoots.push_back(c->operands[0]);
      scopes = openPass(passRoots);
    }
    const std::string slot = colSums_.slotted ? "c" : "c * " + V_ + " + j";
    const Shape& s = ref.op->operands[0]->type.shape;
    Index full = fullIndex(w_, ref, kept, innerVar(), e_.fresh("f"));
    if (regs_.chunks) bindRow(full, s, outputPass);
    for (size_t q = 0; q < cols_.size(); ++q) {
      const Value* x = cols_[q]->operands[0];
      const Index idx = x->type.shape == s ? full : delinearize(w_, linearize(full, s), x->type.shape, e_.fresh("x"));
      const std::string acc = colSums_.at(q, slot);
      w_.accumulate(acc, combiner(cols_[q]->kind), "(float)" + e_.eval(x, idx));
    }
    for (int o : fullOuts_) {
      const Value* v = k_.body.outputs[size_t(o)];
      // Any bijection onto the output's elements will do; its own shape when it differs
      // from the reduced one (a reshape of it), through the row-major position.
      Index idx = v->type.shape == s ? full
                                     : delinearize(w_, linearize(full, s), v->type.shape, "g" + std::to_string(o));
      if (std::count(regs_.vectorOuts.begin(), regs_.vectorOuts.end(), o))
        w_.assign("s" + std::to_string(o) + "[j]", e_.eval(e_.storedForm(v), idx));
      else
        e_.store(v, "out" + std::to_string(o), idx);
    }
    if (regs_.vectorOuts.empty()) {
      closePass(scopes);
      return;
    }
    e_.closeScope();  // the elements of a chunk: store it whole (at outer * r + base)
    e_.openScope(kir::ifThen("aligned"));
    w_.use(Helper::VectorIO);
    for (int o : regs_.vectorOuts)
      w_.store("out" + std::to_string(o), "outer * " + R_ + " + base", "s" + std::to_string(o), regs_.width);
    e_.closeScope();
    e_.openScope(kir::elseIf(""));
    e_.openScope(kir::countedLoop("j", regs_.width, -1));
    for (int o : regs_.vectorOuts)
      w_.store("out" + std::to_string(o), "outer * " + R_ + " + base + j",
               storeValue(k_.body.outputs[size_t(o)]->type.dtype, "s" + std::to_string(o) + "[j]"));
    e_.closeScope();
    e_.closeScope();
    closePass(scopes - 1);
  }

  const FamilyInput& k_;
  KernelBuilder& w_;
  BodyEmitter e_;
  const bool rowKernel_, columns_;
  std::vector<Reduction> reds_;
  std::vector<const Op*> cols_;    // a row kernel's column sums (see ColumnSums)
  std::vector<const Op*> totals_;  // a row kernel's totals of its rows' values (see RowTotals)
  std::vector<int> rowOuts_, fullOuts_, colOuts_, totalOuts_;
  std::vector<int> earlyOuts_;  // a column kernel's full outputs written in the reductions' pass (classify)
  int64_t n_ = 0, r_ = 0;  // points, and reduced elements a point
  int lanes_ = 1, block_ = kBlock, colV_ = 1;
  bool lanesMode_ = false;  // writePoints: a column tile of V > 1 in vector-loop mode
  int64_t grid_ = 1;
  std::vector<const Value*> columnVectors_;
  std::vector<std::vector<size_t>> levels_;
  std::vector<std::optional<std::pair<const Value*, const Value*>>> picks_;
  std::vector<bool> picked_;
  RowRegisters regs_;
  ColumnSums colSums_;
  std::vector<std::string> vectorPointers_, rowConstantPointers_;
  std::string L_, V_, R_;  // lanes, register vector width and reduced elements, as text
};

}  // namespace

std::vector<Launch> emitReduction(const FamilyInput& k, KernelFamily family, KernelBuilder& w) {
  return ReductionEmitter(k, family, w).emit();
}

}  // namespace fusec::codegen
