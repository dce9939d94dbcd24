// row_reduce, col_reduce and reduce_all as one scheme: a group of L threads owns one
// "outer" point (a row, a column, the single scalar) at a time and strides over its r
// reduced elements; each reduction is a per-thread f32 (or integer) accumulator in a fixed
// order, combined across the group by a fixed shuffle/shared-memory tree. Results are
// therefore deterministic run to run. The three families differ only in L:
//   row_reduce: L = 32 (a warp per row) for rows of at most 1024, else a block per row;
//   col_reduce: L = 1 (a thread per column sums all rows in order, coalesced across
//               threads) -- deterministic and enough for norm-weight gradients;
//   reduce_all: one block of 1024 threads.
// Reductions run in body order (softmax: max, then sum), each in its own pass over the
// row; ops after a reduction read its value from a register. Row-shaped outputs are written
// by lane 0, full-shaped ones in a last pass over the row.
#include <algorithm>

#include "codegen/cuda_types.h"
#include "codegen/family_emitters.h"
#include "codegen/scalar_ops.h"
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
Index fullIndex(CodeWriter& w, const Reduction& red, Index k, const std::string& inner, const std::string& prefix) {
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
  auto functor = [](const char* name, OpKind k) {
    return std::string("struct ") + name + " {\n  template <class T> __device__ T operator()(T a, T b) const { return " +
           scalarFormula(k, {"a", "b"}) + "; }\n};\n";
  };
  return functor("fusec_sum", OpKind::Add) + functor("fusec_max", OpKind::Max) + functor("fusec_min", OpKind::Min) +
         R"(// Butterfly over a warp: every lane ends with the same value, combined in a fixed order.
template <class T, class Op> __device__ T fusec_warp_reduce(T v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Over a block: warps reduce, then every thread combines the warp results in warp order.
template <class T, class Op> __device__ T fusec_block_reduce(T v, Op op) {
  __shared__ T part[32];
  v = fusec_warp_reduce(v, op);
  __syncthreads();  // the previous reduction's readers are done with `part`
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  T r = part[0];
  for (unsigned w = 1; w < blockDim.x / 32; ++w) r = op(r, part[w]);
  return r;
}
)";
}

}  // namespace

std::string reductionPrelude() { return prelude(); }

std::vector<Launch> emitReduction(const FamilyInput& k, KernelFamily family, CodeWriter& w) {
  std::vector<Reduction> reds;
  for (auto& op : k.body.ops)
    if (op->info().category == OpCategory::Reduction && fusion::domainOf(*op).kind != fusion::DomainKind::Pointwise)
      reds.push_back(analyse(*op));
  const Reduction& ref = reds.at(0);
  const int64_t n = ref.n, r = ref.r;
  for (const Reduction& red : reds)
    if (red.n != n || red.r != r)
      throw Error("codegen: kernel '" + k.body.name + "' mixes reductions of " + std::to_string(n) + "x" +
                  std::to_string(r) + " and " + std::to_string(red.n) + "x" + std::to_string(red.r) + " elements");

  int lanes = 1, block = kBlock;
  int64_t grid = 1;
  if (family == KernelFamily::RowReduce && r <= 1024) {
    lanes = 32;
    grid = (n * lanes + block - 1) / block;
  } else if (family == KernelFamily::RowReduce) {
    lanes = block = 512;
    grid = n;
  } else if (family == KernelFamily::ColReduce) {
    grid = (n + block - 1) / block;
  } else {
    lanes = block = 1024;
  }
  grid = std::clamp<int64_t>(grid, 1, 65535);
  auto groupReduce = [&](const std::string& v, OpKind kind) {
    if (lanes == 1) return v;
    return std::string(lanes == 32 ? "fusec_warp_reduce(" : "fusec_block_reduce(") + v + ", " + combiner(kind) + "())";
  };

  k.signature(w, k.name, block);
  const std::string L = std::to_string(lanes);
  w.line("// " + std::to_string(n) + " points of " + std::to_string(r) + " reduced elements, " + L +
         " thread(s) per point");
  w.line("const long long lane = threadIdx.x % " + L + ";");
  w.line("const long long group = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / " + L + ";");
  w.line("const long long groups = (long long)gridDim.x * blockDim.x / " + L + ";");
  BodyEmitter e(k.body, w);
  e.openScope("for (long long outer = group; outer < " + std::to_string(n) + "LL; outer += groups)");
  const std::string innerLoop =
      "for (long long inner = lane; inner < " + std::to_string(r) + "LL; inner += " + L + ")";
  for (const Reduction& red : reds) {
    const Op& op = *red.op;
    const DType dt = op.result()->type.dtype;
    const std::string acc = e.fresh("acc"), rt = registerType(dt);
    w.line("// " + e.describe(op));
    w.line(rt + " " + acc + " = " + initValue(op.kind, dt) + ";");
    Index kept = delinearize(w, "outer", red.kept, e.fresh("k"));
    e.openScope(innerLoop);
    Index idx = fullIndex(w, red, kept, "inner", e.fresh("e"));
    w.line(acc + " = " + combiner(op.kind) + "()(" + acc + ", (" + rt + ")" + e.eval(op.operands[0], idx) + ");");
    e.closeScope();
    std::string value = groupReduce(acc, op.kind);
    if (op.kind == OpKind::Mean) value = "(" + value + ") / " + literal(DType::f32, double(r));
    const std::string reg = e.fresh("red");
    w.line("const " + rt + " " + reg + " = " + roundTo(dt, value) + ";");
    e.bindReduction(op.result(), reg);
  }

  std::vector<int> rowOuts, fullOuts;
  for (size_t i = 0; i < k.body.outputs.size(); ++i) {
    const int64_t c = k.body.outputs[i]->type.numel();
    if (c == n) rowOuts.push_back(int(i));
    else if (c == n * r) fullOuts.push_back(int(i));
    else
      throw Error("codegen: kernel '" + k.body.name + "' output " + std::to_string(i) + " has " + std::to_string(c) +
                  " elements, neither " + std::to_string(n) + " nor " + std::to_string(n * r));
  }
  if (!rowOuts.empty()) {
    e.openScope("if (lane == 0)");
    for (int o : rowOuts) {
      const Value* v = k.body.outputs[size_t(o)];
      e.store(v, "out" + std::to_string(o), delinearize(w, "outer", v->type.shape, "q" + std::to_string(o)));
    }
    e.closeScope();
  }
  if (!fullOuts.empty()) {
    Index kept = delinearize(w, "outer", ref.kept, e.fresh("k"));
    e.openScope(innerLoop);
    const Shape& s = ref.op->operands[0]->type.shape;
    Index full = fullIndex(w, ref, kept, "inner", e.fresh("f"));
    for (int o : fullOuts) {
      const Value* v = k.body.outputs[size_t(o)];
      // Any bijection onto the output's elements will do; its own shape when it differs
      // from the reduced one (a reshape of it), through the row-major position.
      Index idx = v->type.shape == s ? full
                                     : delinearize(w, linearize(full, s), v->type.shape, "g" + std::to_string(o));
      e.store(v, "out" + std::to_string(o), idx);
    }
    e.closeScope();
  }
  e.closeScope();
  w.close();
  return {Launch{k.name, {uint32_t(grid), 1, 1}, {uint32_t(block), 1, 1}, 0}};
}

}  // namespace fusec::codegen
