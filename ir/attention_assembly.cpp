#include "ir/attention_assembly.h"

#include <algorithm>

#include "ir/strided_view.h"
#include "ir/type_rules.h"

namespace fusec {

namespace {

// A RoPE rotation recognised: its input x ([..., T, d], f32) and its tables ([T, d/2]).
struct Rotation {
  const Value* x = nullptr;
  const Value* cos = nullptr;
  const Value* sin = nullptr;
};

class Matcher {
 public:
  Matcher(const Op& att, std::vector<const Op*>* ops) : att_(att), ops_(ops) {}

  // `v`, laid out in the assembled value at `offset` with `strides`, is made of parts.
  bool walk(const Value* v, int64_t offset, const std::vector<int64_t>& strides) {
    if (v->def == &att_) return part(v, offset, strides, {});
    const Op* op = v->def;
    if (!op) return false;
    const size_t mark = ops_ ? ops_->size() : 0;
    if (auto rot = rotation(v)) {  // f32 attention: no casts around the rotation
      if (rot->x->def == &att_) return part(rot->x, offset, strides, *rot);
      drop(mark);
    }
    const int rank = v->type.rank();
    switch (op->kind) {
      case OpKind::Concat: {
        const int ax = normalizeAxis(op->attrInt("axis"), rank, "concat");
        int64_t start = 0;
        for (const Value* x : op->operands) {
          if (!walk(x, offset + start * strides[size_t(ax)], strides)) return false;
          start += x->type.shape[size_t(ax)];
        }
        return see(op);
      }
      case OpKind::Reshape: {
        const Value* x = op->operands[0];
        auto st = reshapeStrides(v->type.shape, strides, x->type.shape);
        return st && walk(x, offset, *st) && see(op);
      }
      case OpKind::Permute: {
        const Value* x = op->operands[0];
        const auto& perm = op->attrInts("perm");
        std::vector<int64_t> st(strides.size(), 0);
        for (size_t k = 0; k < perm.size(); ++k) st[size_t(normalizeAxis(perm[k], rank, "permute"))] = strides[k];
        return walk(x, offset, st) && see(op);
      }
      case OpKind::Cast: {
        // cast(rotation(cast(y, f32)), dtype of y) with y a result: y rounded to its dtype, rotated
        // in f32 and rounded again.
        auto rot = rotation(op->operands[0]);
        if (!rot) return false;
        const Op* up = rot->x->def;
        if (!up || up->kind != OpKind::Cast) return false;
        const Value* y = up->operands[0];
        if (y->def != &att_ || y->type.dtype != v->type.dtype) return false;
        see(op), see(up);
        return part(y, offset, strides, *rot);
      }
      default: return false;
    }
  }

  std::vector<AssemblyPart> parts;

 private:
  bool see(const Op* op) {
    if (ops_) ops_->push_back(op);
    return true;
  }

  bool part(const Value* r, int64_t offset, const std::vector<int64_t>& strides, const Rotation& rot) {
    if (strides.empty() || strides.back() != 1) return false;  // the head dim contiguous
    if (rot.cos && r->index > 1) return false;  // the kernel rotates dq and dk, never dv
    for (const AssemblyPart& p : parts)
      if (p.result == r->index) return false;
    parts.push_back(AssemblyPart{r->index, offset, strides, rot.cos, rot.sin});
    return true;
  }

  // t, when `c` is t ([T, h], f32) reshaped to [T, h, 1] and broadcast to `half` ([..., T, h, 1]).
  const Value* table(const Value* c, const Shape& half) {
    const Op* b = c->def;
    if (!b || b->kind != OpKind::Broadcast || c->type.shape != half) return nullptr;
    const Op* r = b->operands[0]->def;
    if (!r || r->kind != OpKind::Reshape) return nullptr;
    const size_t n = half.size();
    const Value* t = r->operands[0];
    if (r->result()->type.shape != Shape{half[n - 3], half[n - 2], 1} || t->type.shape != Shape{half[n - 3], half[n - 2]} ||
        t->type.dtype != DType::f32)
      return nullptr;
    see(b), see(r);
    return t;
  }

  // m = mul(slice(xp, last, s, s + 1), c) in either order: s, xp and the table of c.
  struct Term {
    int64_t s = -1;
    const Value* xp = nullptr;
    const Value* t = nullptr;
  };
  std::optional<Term> term(const Value* m, const Shape& half) {
    const Op* op = m->def;
    if (!op || op->kind != OpKind::Mul) return std::nullopt;
    for (int i = 0; i < 2; ++i) {
      const Op* sl = op->operands[size_t(i)]->def;
      if (!sl || sl->kind != OpKind::Slice) continue;
      const int rank = sl->operands[0]->type.rank();
      const int64_t s = sl->attrInt("start");
      if (normalizeAxis(sl->attrInt("axis"), rank, "slice") != rank - 1 || sl->attrInt("step") != 1 ||
          sl->attrInt("end") != s + 1 || (s != 0 && s != 1))
        continue;
      const Value* t = table(op->operands[size_t(1 - i)], half);
      if (!t) continue;
      see(op), see(sl);
      return Term{s, sl->operands[0], t};
    }
    return std::nullopt;
  }

  // passes/decompose.cpp's rope: reshape(concat({x0 c - x1 s, x0 s + x1 c}, last)) with
  // x0, x1 the two halves of reshape(x, [..., T, d/2, 2]). Canonicalize may have flattened the
  // concat to [n, 2] of pieces reshaped to [n, 1]: the same pairs in the same order.
  std::optional<Rotation> rotation(const Value* v) {
    const Op* r = v->def;
    if (!r || r->kind != OpKind::Reshape || v->type.dtype != DType::f32) return std::nullopt;
    const Op* cat = r->operands[0]->def;
    const Shape& xs = v->type.shape;
    const int rank = v->type.rank();
    if (rank < 2 || xs.back() % 2 != 0 || !cat || cat->kind != OpKind::Concat || cat->operands.size() != 2) return std::nullopt;
    Shape pairs = xs;
    pairs.back() /= 2;
    pairs.push_back(2);
    Shape half = pairs;
    half.back() = 1;
    const Shape& cs = cat->result()->type.shape;
    if (cs.empty() || cs.back() != 2 || normalizeAxis(cat->attrInt("axis"), int(cs.size()), "concat") != int(cs.size()) - 1)
      return std::nullopt;
    const size_t mark = ops_ ? ops_->size() : 0;
    // A concat operand: the sum or difference of shape `half`, maybe through a reshape.
    auto piece = [&](const Value* p) -> const Op* {
      if (p->type.shape != half && p->def && p->def->kind == OpKind::Reshape) {
        see(p->def);
        p = p->def->operands[0];
      }
      return p->type.shape == half ? p->def : nullptr;
    };
    const Op* even = piece(cat->operands[0]);
    const Op* odd = piece(cat->operands[1]);
    if (!even || even->kind != OpKind::Sub || !odd || odd->kind != OpKind::Add) return drop(mark);
    auto a = term(even->operands[0], half), b = term(even->operands[1], half);
    auto c = term(odd->operands[0], half), d = term(odd->operands[1], half);
    if (!a || !b || !c || !d) return drop(mark);
    if (c->s == 1) std::swap(c, d);  // the sum's order is free
    // even = x0 cos - x1 sin, odd = x0 sin + x1 cos, all of one xp.
    if (a->s != 0 || b->s != 1 || c->s != 0 || d->s != 1 || a->xp != b->xp || a->xp != c->xp || a->xp != d->xp ||
        a->t != d->t || b->t != c->t)
      return drop(mark);
    const Op* split = a->xp->def;
    if (!split || split->kind != OpKind::Reshape || a->xp->type.shape != pairs || split->operands[0]->type.shape != xs ||
        split->operands[0]->type.dtype != DType::f32)
      return drop(mark);
    see(r), see(cat), see(even), see(odd), see(split);
    return Rotation{split->operands[0], a->t, b->t};
  }

  std::optional<Rotation> drop(size_t mark) {
    if (ops_) ops_->resize(mark);
    return std::nullopt;
  }

  const Op& att_;
  std::vector<const Op*>* ops_;
};

}  // namespace

std::optional<std::vector<AssemblyPart>> matchAttentionAssembly(const Value* out, const Op& att, std::vector<const Op*>* ops) {
  const size_t mark = ops ? ops->size() : 0;
  Matcher m(att, ops);
  if (!m.walk(out, 0, contiguousStrides(out->type.shape)) || m.parts.empty()) {
    if (ops) ops->resize(mark);
    return std::nullopt;
  }
  if (ops) {  // each op once (a table's broadcast serves both of a rotation's products)
    std::sort(ops->begin() + long(mark), ops->end());
    ops->erase(std::unique(ops->begin() + long(mark), ops->end()), ops->end());
  }
  return std::move(m.parts);
}

}  // namespace fusec
