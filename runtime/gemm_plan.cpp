#include "runtime/gemm_plan.h"

#include "ir/collectives.h"

#include <string>

#include "ir/printer.h"
#include "ir/strided_view.h"

namespace fusec::rt {
namespace {

[[noreturn]] void fail(const Op& mm, const std::string& why) {
  throw Error("cannot plan GEMM " + mm.result()->type.str() + ": " + why);
}

// A matrix of `rows` x `cols` whose element (i, j) sits at i*rs + j*cs, as a BLAS layout.
// A dim of size 1 never steps, so its stride is free; ld is then the other dim's extent.
bool matrixLayout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, GemmMatrix& out) {
  if ((cols == 1 || cs == 1) && (rows == 1 || rs >= cols)) {
    out.colMajor = false;
    out.ld = rows == 1 ? std::max<int64_t>(cols, 1) : rs;
    return true;
  }
  if ((rows == 1 || rs == 1) && (cols == 1 || cs >= rows)) {
    out.colMajor = true;
    out.ld = cols == 1 ? std::max<int64_t>(rows, 1) : cs;
    return true;
  }
  return false;
}

// True when dims [from, end) of `shape` (size-1 dims skipped) step through memory as one
// flattened dim: each stride is the next non-trivial dim's stride times its size.
bool chains(const Shape& shape, const std::vector<int64_t>& strides, size_t from, size_t end) {
  std::optional<size_t> inner;
  for (size_t d = end; d-- > from;) {
    if (shape[d] == 1) continue;
    if (inner && strides[d] != strides[*inner] * shape[*inner]) return false;
    inner = d;
  }
  return true;
}

// Stride of the innermost non-trivial dim in [from, end), 0 if all are size 1.
int64_t innerStride(const Shape& shape, const std::vector<int64_t>& strides, size_t from, size_t end) {
  for (size_t d = end; d-- > from;)
    if (shape[d] != 1) return strides[d];
  return 0;
}

struct Operand {
  StridedView view;
  std::vector<int64_t> batchStrides;  // per logical batch dim; 0 for a rank-2 operand
};

// Views `v` (logical [batch..., rows, cols] before `transposed`) as the logical matrix op(v).
Operand planOperand(const Op& mm, const Value* v, bool transposed, const Shape& batchShape, GemmMatrix& m,
                    const char* what) {
  auto view = resolveView(v);
  const Shape& s = v->type.shape;
  if (!view || !gemmReadable(*view, s)) fail(mm, std::string(what) + " is a view that needs a copy");
  const size_t r = s.size();
  const size_t rowDim = transposed ? r - 1 : r - 2, colDim = transposed ? r - 2 : r - 1;
  if (!matrixLayout(s[rowDim], s[colDim], view->strides[rowDim], view->strides[colDim], m))
    fail(mm, std::string(what) + " is neither row- nor column-major");
  m.base = view->base;
  Operand o{*view, std::vector<int64_t>(batchShape.size(), 0)};
  if (r > 2) {
    if (Shape(s.begin(), s.end() - 2) != batchShape) fail(mm, std::string(what) + " has other batch dims than the result");
    o.batchStrides.assign(view->strides.begin(), view->strides.end() - 2);
  }
  return o;
}

}  // namespace

const Value* storageOf(const Value* base) {
  // An all_reduce result reduced in place (no offset of its own) is its operand's storage.
  if (const Value* x = inPlaceOperandOf(base); x && base->offset < 0) return storageOf(x);
  const Op* d = base->def;
  if (d && d->kind == OpKind::Concat && base->offset < 0 && !d->operands.empty()) return storageOf(d->operands[0]);
  return base;
}

GemmPlan planGemm(const Op& mm) {
  if (mm.kind != OpKind::Matmul) throw Error("internal: planGemm on a non-matmul op");
  const Value* av = mm.operands.at(0);
  const Value* bv = mm.operands.at(1);
  const Value* cv = mm.result();
  GemmPlan p;
  p.dtype = av->type.dtype;
  if (p.dtype != DType::f32 && p.dtype != DType::bf16) fail(mm, "only f32 and bf16 GEMMs run on the GPU");
  if (bv->type.dtype != p.dtype) fail(mm, "operand dtypes differ");
  p.widenC = cv->type.dtype != p.dtype;
  if (p.widenC && cv->type.dtype != DType::f32) fail(mm, "a GEMM's result is its operands' dtype or f32");

  // The logical result [batch..., M, N] and where each of its dims sits in C's storage.
  const Shape& rs = cv->type.shape;
  const size_t rank = rs.size();
  std::vector<int64_t> perm = mm.attrInts("out_perm");
  if (perm.empty())
    for (size_t i = 0; i < rank; ++i) perm.push_back(int64_t(i));
  if (perm.size() != rank || perm.back() != int64_t(rank - 1)) fail(mm, "out_perm must keep N last");
  Shape logical(rank);
  std::vector<int64_t> cStrides(rank);
  const std::vector<int64_t> stored = contiguousStrides(rs);
  for (size_t i = 0; i < rank; ++i) {
    logical[size_t(perm[i])] = rs[i];
    cStrides[size_t(perm[i])] = stored[i];
  }
  const size_t nb = rank - 2;
  const Shape batchShape(logical.begin(), logical.begin() + long(nb));
  p.M = logical[rank - 2];
  p.N = logical[rank - 1];
  const bool ta = mm.attrBool("transpose_a"), tb = mm.attrBool("transpose_b");
  const Shape& as = av->type.shape;
  p.K = ta ? as[as.size() - 2] : as.back();

  Operand a = planOperand(mm, av, ta, batchShape, p.a, "operand a");
  Operand b = planOperand(mm, bv, tb, batchShape, p.b, "operand b");
  if (!matrixLayout(p.M, p.N, cStrides[rank - 2], cStrides[rank - 1], p.c) || p.c.colMajor)
    fail(mm, "the result is not row-major");
  p.c.base = cv;
  Operand c{StridedView{cv, 0, cStrides}, std::vector<int64_t>(cStrides.begin(), cStrides.begin() + long(nb))};

  // [batch..., M] x [K, N] with a row-major A and C whose batch dims flatten into their rows
  // is one taller GEMM (the usual activations x weight): better for cuBLASLt than a batch.
  Shape rowsShape = batchShape;
  rowsShape.push_back(p.M);
  auto rowStrides = [&](const Operand& o, const GemmMatrix& m) {
    std::vector<int64_t> st = o.batchStrides;
    st.push_back(m.ld);
    return st;
  };
  const auto aRows = rowStrides(a, p.a), cRows = rowStrides(c, p.c);
  bool bBroadcast = true;
  for (int64_t s : b.batchStrides) bBroadcast = bBroadcast && s == 0;
  // The flattened row dim steps like its innermost non-trivial part (a batch dim when M was
  // 1); 0 when every part has size 1, which leaves ld free. It must still cover a row.
  const int64_t sA = innerStride(rowsShape, aRows, 0, nb + 1), sC = innerStride(rowsShape, cRows, 0, nb + 1);
  const int64_t ldA = sA == 0 ? p.K : sA, ldC = sC == 0 ? p.N : sC;
  if (nb > 0 && bBroadcast && !p.a.colMajor && chains(rowsShape, aRows, 0, nb + 1) &&
      chains(rowsShape, cRows, 0, nb + 1) && ldA >= p.K && ldC >= p.N) {
    for (int64_t d : batchShape) p.M *= d;
    p.a.ld = ldA;
    p.c.ld = ldC;
    p.launches.push_back({a.view.offset, b.view.offset, c.view.offset});
    return p;
  }

  // The longest suffix of batch dims that flattens for all three operands is the strided
  // batch of one launch; the dims before it are looped over (one launch each).
  size_t inner = nb;
  while (inner > 0 && chains(batchShape, a.batchStrides, inner - 1, nb) &&
         chains(batchShape, b.batchStrides, inner - 1, nb) && chains(batchShape, c.batchStrides, inner - 1, nb))
    --inner;
  for (size_t d = inner; d < nb; ++d) p.batch *= batchShape[d];
  p.a.batchStride = innerStride(batchShape, a.batchStrides, inner, nb);
  p.b.batchStride = innerStride(batchShape, b.batchStrides, inner, nb);
  p.c.batchStride = innerStride(batchShape, c.batchStrides, inner, nb);

  std::vector<int64_t> idx(inner, 0);
  for (;;) {
    std::array<int64_t, 3> off{a.view.offset, b.view.offset, c.view.offset};
    for (size_t d = 0; d < inner; ++d) {
      off[0] += idx[d] * a.batchStrides[d];
      off[1] += idx[d] * b.batchStrides[d];
      off[2] += idx[d] * c.batchStrides[d];
    }
    p.launches.push_back(off);
    size_t d = inner;
    while (d > 0 && ++idx[d - 1] == batchShape[d - 1]) idx[--d] = 0;
    if (d == 0) break;
  }
  return p;
}

GemmShapeKey shapeKey(const GemmPlan& p) {
  return {p.M,        p.N,        p.K,        p.batch,    p.dtype,          p.widenC,         p.a.colMajor,     p.b.colMajor,
          p.a.ld,     p.b.ld,     p.c.ld,     p.a.batchStride, p.b.batchStride, p.c.batchStride};
}

}  // namespace fusec::rt
