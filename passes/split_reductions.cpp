// split-reductions: a column reduction over many rows becomes two, so that it fills the GPU
// and stays deterministic (Inductor's split reductions).
//
// A col_reduce kernel gives each block a tile of 32 (or 32 x V) columns (passes/fusion/
// domain.h, codegen/reduce_kernels.cpp). A norm-weight gradient of small at batch 64 sums
// 16,384 rows of 768 columns: 24 blocks on 132 SMs, each looping over every row, 0.42 ms at
// ~5% of the copy bandwidth. Here
//     %g = sum(%x) {axes = [0, 1]} : f32[768]            x: f32[64,256,768]
// becomes
//     %p = sum(reshape(%x) : f32[128,128,768]) {axes = [1]} : f32[128,768]
//     %g = sum(%p) {axes = [0]} : f32[768]                                  (128 rows)
// Both stages are column reductions (a reduced middle block is a Col domain too), each in a
// fixed order, so the result is the same bits on every run; it differs from the one-stage
// sum only by f32 reassociation. The split is chosen from the work, not the device: the
// fewest partials (a divisor of the rows) that give at least kTargetPoints partial sums,
// each of at least kMinRowsPerPartial rows. 65,536 points are 256 tiles of 256 columns
// (codegen gives a thread 8 adjacent columns): two or more blocks per multiprocessor on
// an H100 or H200. A fixed 256 rows per partial left medium at batch 16 (4,096 rows of
// 1,024 columns) with 64 such tiles. Reductions of fewer than kMinRowsToSplit rows are left
// alone; only f32 sum, reduce_max and reduce_min are split (mean's scale would need a third
// op; none is this large).
//
// A column reduction whose elements a row reduction also reads (the norm-weight gradient
// beside the rmsnorm backward: both read dy and x) is left whole: fuse makes its column sums
// part of that row kernel (fusion/domain.h columnSums), which reads those rows anyway.
#include <algorithm>

#include "ir/builder.h"
#include "ir/strided_view.h"
#include "passes/fusion/domain.h"
#include "passes/pass.h"
#include "support/ptr_hash.h"

namespace fusec {
namespace {

constexpr int64_t kTargetPoints = 65536, kMinRowsPerPartial = 64;
// Below this many rows one col_reduce kernel is short enough (a norm-weight gradient at batch
// 4, 1024 rows: 27 us), and a second launch per gradient would cost more than it saves in a
// step that is launch-bound.
constexpr int64_t kMinRowsToSplit = 4096;

bool splittable(OpKind k) { return k == OpKind::Sum || k == OpKind::RMax || k == OpKind::RMin; }

// The number of partials for a column reduction of `r` rows of `n` points: the smallest
// divisor s of r with s * n >= kTargetPoints, else the largest that leaves at least
// kMinRowsPerPartial rows in each (1: do not split, below kMinRowsToSplit).
int64_t partialsFor(int64_t r, int64_t n) {
  int64_t best = 1;
  if (r < kMinRowsToSplit) return best;
  for (int64_t s = 2; s * kMinRowsPerPartial <= r; ++s) {
    if (r % s != 0) continue;
    best = s;
    if (s * n >= kTargetPoints) break;
  }
  return best;
}

// The stored values of `numel` elements that `v` is computed from element by element: `v`
// itself, or, through pointwise ops and views of that element count, their operands.
// Each value is visited once (a shared subexpression is not walked again per use), and at
// most kMaxLeafWalk values: a residual stream is one pointwise chain through every layer,
// so an unbounded walk from each norm made the pass quadratic in the layers; a kernel fuses
// neighbours, and what lies further up that chain is not read by one kernel anyway.
constexpr size_t kMaxLeafWalk = 256;

std::vector<const Value*> elementLeaves(const Value* root, int64_t numel) {
  std::vector<const Value*> out;
  PtrSet<const Value*> seen;
  std::vector<const Value*> stack{root};
  while (!stack.empty() && seen.size() < kMaxLeafWalk) {
    const Value* v = stack.back();
    stack.pop_back();
    if (v->type.numel() != numel || !seen.insert(v).second) continue;
    const Op* d = v->def;
    if (!d || (d->info().category != OpCategory::Pointwise && !isViewOp(d->kind))) {
      out.push_back(v);
      continue;
    }
    for (const Value* o : d->operands) stack.push_back(o);
  }
  return out;
}

// For each stored value, the domains of the row reductions whose elements come from it
// (indexed by value, so a column reduction looks at the row reductions that share its
// values, not at every row reduction of the program). A domain is kept once per value: the
// walk above reaches back along the residual stream through up to kMaxLeafWalk values, so a
// value there is read by the norms of many layers, all of one domain, and listing each of
// them made a column reduction's check cost layers x leaves.
struct RowReaders {
  PtrMap<const Value*, std::vector<fusion::Domain>> byLeaf;
};

RowReaders rowReaders(const Graph& g) {
  RowReaders rows;
  for (auto& op : g.ops) {
    if (op->info().category != OpCategory::Reduction) continue;
    const fusion::Domain d = fusion::reductionDomain(op->operands[0]->type.shape, op->attrInts("axes"));
    if (d.kind != fusion::DomainKind::Row) continue;
    for (const Value* v : elementLeaves(op->operands[0], d.n * d.r)) {
      std::vector<fusion::Domain>& ds = rows.byLeaf[v];
      if (std::find(ds.begin(), ds.end(), d) == ds.end()) ds.push_back(d);
    }
  }
  return rows;
}

// True when a row reduction reads a stored value that the column reduction of `x` (domain
// `col`) is computed from, over the same elements.
bool sharesRows(const Value* x, const fusion::Domain& col, const RowReaders& rows) {
  for (const Value* v : elementLeaves(x, col.n * col.r))
    if (auto it = rows.byLeaf.find(v); it != rows.byLeaf.end())
      for (const fusion::Domain& row : it->second)
        if (fusion::sumsColumnsOf(col, row)) return true;
  return false;
}

bool splitGraph(Graph& g) {
  bool changed = false;
  const RowReaders rows = rowReaders(g);
  std::vector<std::unique_ptr<Op>> old = std::move(g.ops);
  g.ops.clear();
  PtrMap<const Value*, Value*> repl;  // split reduction -> its two-stage value
  std::vector<std::unique_ptr<Op>> graveyard;     // replaced ops stay allocated (no address reuse)
  Builder b(g);
  for (auto& op : old) {
    for (Value*& v : op->operands)
      if (auto it = repl.find(v); it != repl.end()) v = it->second;
    Value* x = op->operands.empty() ? nullptr : op->operands[0];
    // Kernel bodies (already fused) are not looked into; f32 only, so that the partials
    // round like the one-stage accumulator (bf16 partials would round twice).
    const bool candidate = splittable(op->kind) && x->type.dtype == DType::f32;
    const fusion::Domain d = candidate ? fusion::reductionDomain(x->type.shape, op->attrInts("axes")) : fusion::Domain{};
    const int64_t parts = d.kind == fusion::DomainKind::Col && !sharesRows(x, d, rows) ? partialsFor(d.r, d.n) : 1;
    if (parts == 1) {
      g.ops.push_back(std::move(op));
      continue;
    }
    // A Col domain reduces the leading dims (size-1 dims aside), so x's row-major elements
    // are r rows of n kept points: reshaping to [parts, r / parts, n] moves nothing.
    const size_t first = g.ops.size();
    Value* partial = b.reduce(op->kind, b.reshape(x, {parts, d.r / parts, d.n}), {1});
    Value* result = b.reduce(op->kind, partial, {0});
    if (result->type.shape != op->result()->type.shape) result = b.reshape(result, op->result()->type.shape);
    for (size_t k = first; k < g.ops.size(); ++k) g.ops[k]->loc = op->loc;
    if (!op->result()->name.empty()) partial->name = op->result()->name + ".partial";
    result->name = op->result()->name;
    repl[op->result()] = result;
    graveyard.push_back(std::move(op));
    changed = true;
  }
  for (Value*& v : g.outputs)
    if (auto it = repl.find(v); it != repl.end()) v = it->second;
  return changed;
}

}  // namespace

std::unique_ptr<Pass> createSplitReductionsPass() {
  return std::make_unique<FunctionPass>("split-reductions", &splitGraph);
}

}  // namespace fusec
