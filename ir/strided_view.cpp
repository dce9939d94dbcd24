#include "ir/strided_view.h"

#include "ir/type_rules.h"

namespace fusec {

bool isViewOp(OpKind k) {
  return k == OpKind::Reshape || k == OpKind::Permute || k == OpKind::Slice || k == OpKind::Broadcast;
}

bool keepsDimOrder(const Shape& in, const std::vector<int64_t>& perm) {
  int64_t last = -1;
  for (int64_t p : perm) {
    const int64_t d = p < 0 ? p + int64_t(in.size()) : p;
    if (in[size_t(d)] == 1) continue;
    if (d < last) return false;
    last = d;
  }
  return true;
}

std::vector<int64_t> contiguousStrides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

// Strides of `to` over the same elements as `from` viewed with `strides`, if they exist.
// This is the stride-chaining rule of PyTorch's view(): walk `from` from the innermost dim,
// cut it into chunks whose dims chain (stride[k-1] == size[k] * stride[k]), and require
// every chunk to be covered exactly by consecutive dims of `to`.
std::optional<std::vector<int64_t>> reshapeStrides(const Shape& from, const std::vector<int64_t>& strides,
                                                   const Shape& to) {
  int64_t numel = 1;
  for (int64_t d : from) numel *= d;
  if (numel == 0 || from.empty()) return contiguousStrides(to);
  std::vector<int64_t> out(to.size(), 0);
  int64_t viewD = int64_t(to.size()) - 1;
  int64_t chunkBase = strides.back(), tensorNumel = 1, viewNumel = 1;
  for (int64_t d = int64_t(from.size()) - 1; d >= 0; --d) {
    tensorNumel *= from[size_t(d)];
    const bool chunkEnds =
        d == 0 || (from[size_t(d - 1)] != 1 && strides[size_t(d - 1)] != tensorNumel * chunkBase);
    if (!chunkEnds) continue;
    while (viewD >= 0 && (viewNumel < tensorNumel || to[size_t(viewD)] == 1)) {
      out[size_t(viewD)] = viewNumel * chunkBase;
      viewNumel *= to[size_t(viewD)];
      --viewD;
    }
    if (viewNumel != tensorNumel) return std::nullopt;
    if (d > 0) {
      chunkBase = strides[size_t(d - 1)];
      tensorNumel = 1;
      viewNumel = 1;
    }
  }
  if (viewD != -1) return std::nullopt;
  return out;
}

std::optional<StridedView> resolveView(const Value* v) {
  const Op* op = v->def;
  if (!op || !isViewOp(op->kind)) {
    StridedView s;
    s.base = v;
    s.strides = contiguousStrides(v->type.shape);
    return s;
  }
  const Value* x = op->operands.at(0);
  std::optional<StridedView> in = resolveView(x);
  if (!in) return std::nullopt;
  StridedView out = *in;
  const Shape& xs = x->type.shape;
  const Shape& ys = v->type.shape;
  switch (op->kind) {
    case OpKind::Permute: {
      const auto& perm = op->attrInts("perm");
      for (size_t i = 0; i < perm.size(); ++i) out.strides[i] = in->strides.at(size_t(perm[i]));
      return out;
    }
    case OpKind::Slice: {
      int ax = normalizeAxis(op->attrInt("axis"), x->type.rank(), "slice");
      out.offset += op->attrInt("start") * in->strides[size_t(ax)];
      // One element taken: its stride is never used (and stride * step could overflow).
      if (op->result()->type.shape[size_t(ax)] > 1) out.strides[size_t(ax)] *= op->attrInt("step");
      return out;
    }
    case OpKind::Broadcast: {
      const size_t lead = ys.size() - xs.size();
      out.strides.assign(ys.size(), 0);
      for (size_t d = 0; d < xs.size(); ++d) out.strides[lead + d] = xs[d] == ys[lead + d] ? in->strides[d] : 0;
      return out;
    }
    case OpKind::Reshape: {
      auto st = reshapeStrides(xs, in->strides, ys);
      if (!st) return std::nullopt;
      out.strides = *st;
      return out;
    }
    default: return std::nullopt;
  }
}

bool isContiguousView(const StridedView& view, const Shape& shape) {
  int64_t expect = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (view.strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

bool gemmReadable(const StridedView& view, const Shape& shape) {
  const size_t r = shape.size();
  if (r < 2) return false;
  const int64_t rows = shape[r - 2], cols = shape[r - 1];
  const int64_t rs = view.strides[r - 2], cs = view.strides[r - 1];
  const bool rowMajor = (cols == 1 || cs == 1) && (rows == 1 || rs >= cols);
  const bool colMajor = (rows == 1 || rs == 1) && (cols == 1 || cs >= rows);
  return rowMajor || colMajor;
}

std::optional<int64_t> uniformBatchStride(const StridedView& view, const Shape& shape) {
  const size_t r = shape.size();
  if (r <= 2) return 0;
  // Collapse the batch dims (size-1 dims ignored) into one: they must chain.
  std::optional<int64_t> inner;
  int64_t innerSpan = 1;  // elements of the batch index space below the current dim
  for (size_t i = r - 2; i-- > 0;) {
    if (shape[i] == 1) continue;
    if (!inner) {
      inner = view.strides[i];
    } else if (view.strides[i] != *inner * innerSpan) {
      return std::nullopt;
    }
    innerSpan *= shape[i];
  }
  return inner ? *inner : 0;
}

}  // namespace fusec
