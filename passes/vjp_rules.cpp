#include "passes/vjp_rules.h"

#include <cmath>
#include <numbers>
#include <unordered_map>

#include "ir/type_rules.h"

namespace fusec {

Value* Vjp::rowSum(Value* v) {
  const int r = v->type.rank();
  return bcast(b.reduce(OpKind::Sum, v, {r - 1}, true), v->type.shape);
}

Value* Vjp::softmaxLast(Value* x) {
  const int r = x->type.rank();
  Value* m = bcast(b.reduce(OpKind::RMax, x, {r - 1}, true), x->type.shape);
  Value* e = b.unary(OpKind::Exp, sub(x, m));
  return div(e, rowSum(e));
}

namespace {

std::vector<int64_t> range(int64_t from, int64_t to) {
  std::vector<int64_t> r;
  for (int64_t i = from; i < to; ++i) r.push_back(i);
  return r;
}

std::vector<int64_t> normAxes(const Op& op, int rank) {
  std::vector<int64_t> axes;
  for (int64_t a : op.attrInts("axes")) axes.push_back(normalizeAxis(a, rank, op.info().name.data()));
  return axes;
}

Shape keepShape(const Shape& s, const std::vector<int64_t>& axes) {
  Shape k = s;
  for (int64_t a : axes) k[size_t(a)] = 1;
  return k;
}

std::vector<int64_t> inversePermutation(const std::vector<int64_t>& perm) {
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[size_t(perm[i])] = int64_t(i);
  return inv;
}

// ---- pointwise (y: the result, a: the operand)

// Rules of one operand a: the adjoint dy times what f gives.
#define FUSEC_UNARY_VJP(Name, ...)                                        \
  void Name(Vjp& v, const Op& op, Value* dy) {                            \
    [[maybe_unused]] Value* a = op.operands[0];                           \
    [[maybe_unused]] Value* y = op.result();                              \
    v.give(op, 0, [&] { return __VA_ARGS__; });                           \
  }
FUSEC_UNARY_VJP(negVjp, v.neg(dy))
// sign(a) * dy, sign(0) = 0
FUSEC_UNARY_VJP(absVjp, v.sel(v.b.binary(OpKind::Gt, a, v.c(0, dy)), dy,
                              v.sel(v.b.binary(OpKind::Lt, a, v.c(0, dy)), v.neg(dy), v.c(0, dy))))
FUSEC_UNARY_VJP(reluVjp, v.sel(v.b.binary(OpKind::Gt, a, v.c(0, dy)), dy, v.c(0, dy)))
FUSEC_UNARY_VJP(expVjp, v.mul(dy, y))
FUSEC_UNARY_VJP(logVjp, v.div(dy, a))
FUSEC_UNARY_VJP(sqrtVjp, v.div(v.mul(dy, v.c(0.5, dy)), y))
FUSEC_UNARY_VJP(rsqrtVjp, v.mul(dy, v.mul(v.c(-0.5, dy), v.div(y, a))))  // d/da a^(-1/2) = -1/2 * y / a
FUSEC_UNARY_VJP(recipVjp, v.neg(v.mul(dy, v.mul(y, y))))
FUSEC_UNARY_VJP(tanhVjp, v.mul(dy, v.sub(v.c(1, dy), v.mul(y, y))))
FUSEC_UNARY_VJP(sinVjp, v.mul(dy, v.b.unary(OpKind::Cos, a)))
FUSEC_UNARY_VJP(cosVjp, v.neg(v.mul(dy, v.b.unary(OpKind::Sin, a))))
FUSEC_UNARY_VJP(sigmoidVjp, v.mul(dy, v.mul(y, v.sub(v.c(1, dy), y))))
// 2/sqrt(pi) exp(-a^2)
FUSEC_UNARY_VJP(erfVjp, v.mul(dy, v.mul(v.c(2 / std::sqrt(std::numbers::pi), a), v.b.unary(OpKind::Exp, v.neg(v.mul(a, a))))))
#undef FUSEC_UNARY_VJP

void addVjp(Vjp& v, const Op& op, Value* dy) {
  v.give(op, 0, [&] { return dy; });
  v.give(op, 1, [&] { return dy; });
}
void subVjp(Vjp& v, const Op& op, Value* dy) {
  v.give(op, 0, [&] { return dy; });
  v.give(op, 1, [&] { return v.neg(dy); });
}
void mulVjp(Vjp& v, const Op& op, Value* dy) {
  v.give(op, 0, [&] { return v.mul(dy, op.operands[1]); });
  v.give(op, 1, [&] { return v.mul(dy, op.operands[0]); });
}
void divVjp(Vjp& v, const Op& op, Value* dy) {  // d/db a/b = -y/b
  Value* b = op.operands[1];
  v.give(op, 0, [&] { return v.div(dy, b); });
  v.give(op, 1, [&] { return v.neg(v.div(v.mul(dy, op.result()), b)); });
}
void maxMinVjp(Vjp& v, const Op& op, Value* dy) {  // ties go to the first operand
  Value* first = v.b.binary(op.kind == OpKind::Max ? OpKind::Ge : OpKind::Le, op.operands[0], op.operands[1]);
  v.give(op, 0, [&] { return v.sel(first, dy, v.c(0, dy)); });
  v.give(op, 1, [&] { return v.sel(first, v.c(0, dy), dy); });
}
void powVjp(Vjp& v, const Op& op, Value* dy) {
  Value *a = op.operands[0], *b = op.operands[1];
  v.give(op, 0, [&] { return v.mul(dy, v.mul(b, v.b.binary(OpKind::Pow, a, v.sub(b, v.c(1, dy))))); });
  v.give(op, 1, [&] { return v.mul(dy, v.mul(op.result(), v.b.unary(OpKind::Log, a))); });
}
void selectVjp(Vjp& v, const Op& op, Value* dy) {
  Value* cond = op.operands[0];
  v.give(op, 1, [&] { return v.sel(cond, dy, v.c(0, dy)); });
  v.give(op, 2, [&] { return v.sel(cond, v.c(0, dy), dy); });
}
void castVjp(Vjp& v, const Op& op, Value* dy) {
  const DType from = op.operands[0]->type.dtype;
  v.give(op, 0, [&] { return from == dy->type.dtype ? dy : v.b.cast(dy, from); });
}

// ---- reductions

void sumVjp(Vjp& v, const Op& op, Value* dy) {
  const Shape& xs = op.operands[0]->type.shape;
  v.give(op, 0, [&] { return v.bcast(v.reshape(dy, keepShape(xs, normAxes(op, int(xs.size())))), xs); });
}
void meanVjp(Vjp& v, const Op& op, Value* dy) {
  const Shape& xs = op.operands[0]->type.shape;
  v.give(op, 0, [&] {
    const std::vector<int64_t> axes = normAxes(op, int(xs.size()));
    int64_t count = 1;
    for (int64_t a : axes) count *= xs[size_t(a)];
    Value* d = v.reshape(dy, keepShape(xs, axes));
    return v.bcast(v.div(d, v.c(double(count), d)), xs);
  });
}
void extremumVjp(Vjp& v, const Op& op, Value* dy) {  // to the arg positions, split evenly between ties (as torch.amax)
  Value* x = op.operands[0];
  const Shape& xs = x->type.shape;
  v.give(op, 0, [&] {
    const std::vector<int64_t> axes = normAxes(op, int(xs.size()));
    const Shape ks = keepShape(xs, axes);
    Value* hit = v.b.binary(OpKind::Eq, x, v.bcast(v.reshape(op.result(), ks), xs));
    Value* ties = v.sum(v.sel(hit, v.c(1, x), v.c(0, x)), axes, true);
    Value* d = v.div(v.reshape(dy, ks), ties);
    return v.sel(hit, v.bcast(d, xs), v.c(0, x));
  });
}

// ---- layout

void reshapeVjp(Vjp& v, const Op& op, Value* dy) {
  v.give(op, 0, [&] { return v.reshape(dy, op.operands[0]->type.shape); });
}
void permuteVjp(Vjp& v, const Op& op, Value* dy) {
  v.give(op, 0, [&] { return v.b.permute(dy, inversePermutation(op.attrInts("perm"))); });
}
void broadcastVjp(Vjp& v, const Op& op, Value* dy) {  // sum over the added leading dims and the dims that were 1
  const Shape& xs = op.operands[0]->type.shape;
  const Shape& ys = dy->type.shape;
  v.give(op, 0, [&] {
    const int off = int(ys.size() - xs.size());
    std::vector<int64_t> axes = range(0, off);
    for (int d = 0; d < int(xs.size()); ++d)
      if (xs[size_t(d)] == 1 && ys[size_t(d + off)] != 1) axes.push_back(d + off);
    return v.reshape(v.sum(dy, axes, false), xs);
  });
}

// The adjoint of a slice scattered back into zeros of the operand's shape. A strided slice
// interleaves step-1 zeros after each element ([.., n, 1, ..] ++ zeros [.., n, step-1, ..],
// reshaped to [.., n*step, ..]), then both cases pad with zeros before `start` and after.
Value* sliceAdjoint(Vjp& v, const Op& op, Value* dy) {
  const Type& xt = op.operands[0]->type;
  const Shape& ys = dy->type.shape;
  const int ax = normalizeAxis(op.attrInt("axis"), xt.rank(), "slice");
  const int64_t start = op.attrInt("start"), step = op.attrInt("step"), dim = xt.shape[size_t(ax)], n = ys[size_t(ax)];
  if (n == 0) return v.zeros(xt);
  auto zerosAlong = [&](int64_t len, Shape s, int axis) {
    s[size_t(axis)] = len;
    return v.zeros(Type{xt.dtype, std::move(s)});
  };
  Value* d = dy;
  if (step > 1 && n > 1) {  // one element taken: a plain slice of it (step - 1 zeros could be huge)
    Shape s1 = ys;
    s1.insert(s1.begin() + ax + 1, 1);
    Value* spread = v.b.concat({v.reshape(dy, s1), zerosAlong(step - 1, s1, ax + 1)}, ax + 1);
    Shape s2 = ys;
    s2[size_t(ax)] = n * step;
    d = v.reshape(spread, s2);
  }
  const int64_t covered = d->type.shape[size_t(ax)], tail = dim - start;
  if (covered > tail) d = v.b.slice(d, ax, 0, tail);
  std::vector<Value*> parts;
  if (start > 0) parts.push_back(zerosAlong(start, ys, ax));
  parts.push_back(d);
  if (covered < tail) parts.push_back(zerosAlong(tail - covered, ys, ax));
  return parts.size() == 1 ? d : v.b.concat(parts, ax);
}
void sliceVjp(Vjp& v, const Op& op, Value* dy) {
  v.give(op, 0, [&] { return sliceAdjoint(v, op, dy); });
}
void concatVjp(Vjp& v, const Op& op, Value* dy) {
  const int ax = normalizeAxis(op.attrInt("axis"), dy->type.rank(), "concat");
  int64_t at = 0;
  for (size_t i = 0; i < op.operands.size(); ++i) {
    const int64_t len = op.operands[i]->type.shape[size_t(ax)];
    v.give(op, i, [&] { return len == dy->type.shape[size_t(ax)] ? dy : v.b.slice(dy, ax, at, at + len); });
    at += len;
  }
}
void gatherVjp(Vjp& v, const Op& op, Value* dy) {
  v.give(op, 0, [&] { return v.b.scatterAdd(v.zeros(op.operands[0]->type), op.operands[1], dy, op.attrInt("axis")); });
}
void scatterAddVjp(Vjp& v, const Op& op, Value* dy) {
  v.give(op, 0, [&] { return dy; });
  v.give(op, 2, [&] { return v.b.gather(dy, op.operands[1], op.attrInt("axis")); });
}

// ---- matmul: C = op(A) op(B), op(X) = X^T under its transpose flag.
// d op(A) = dC op(B)^T and d op(B) = op(A)^T dC; a stored-transposed operand's gradient is
// the transpose of that product, which is again one matmul with swapped operands.
void matmulVjp(Vjp& v, const Op& op, Value* dC) {
  Value *A = op.operands[0], *B = op.operands[1];
  // An out_dtype matmul is matmul-then-cast: dC narrows back as a cast's VJP would.
  if (dC->type.dtype != A->type.dtype) dC = v.b.cast(dC, A->type.dtype);
  // dC arrives in the out_perm layout: back to the logical [batch..., M, N] first.
  if (const auto& outPerm = op.attrInts("out_perm"); !outPerm.empty()) dC = v.b.permute(dC, inversePermutation(outPerm));
  const bool ta = op.attrBool("transpose_a"), tb = op.attrBool("transpose_b");
  const int ra = A->type.rank(), rb = B->type.rank();
  v.give(op, 0, [&] {
    Value* d = ta ? v.mm(B, dC, tb, true) : v.mm(dC, B, false, !tb);
    return ra == 2 && rb > 2 ? v.sum(d, range(0, rb - 2), false) : d;  // A shared across B's batch
  });
  v.give(op, 1, [&] {
    if (rb == 2 && ra > 2 && !ta) {
      // B shared across A's batch: fold the batch into A's rows, one GEMM over all of them.
      const Shape& as = A->type.shape;
      const int64_t rows = A->type.numel() / as.back();
      Value* A2 = v.reshape(A, {rows, as.back()});
      Value* dC2 = v.reshape(dC, {rows, dC->type.shape.back()});
      return tb ? v.mm(dC2, A2, true, false) : v.mm(A2, dC2, true, false);
    }
    Value* d = tb ? v.mm(dC, A, true, ta) : v.mm(A, dC, !ta, false);
    return rb == 2 && ra > 2 ? v.sum(d, range(0, ra - 2), false) : d;
  });
}

// ---- composites, in primitives

void softmaxVjp(Vjp& v, const Op& op, Value* dy) {
  Value *x = op.operands[0], *y = op.result();
  v.give(op, 0, [&] {
    const int ax = normalizeAxis(op.attrInt("axis"), x->type.rank(), "softmax");
    Value* s = v.bcast(v.b.reduce(OpKind::Sum, v.mul(dy, y), {ax}, true), x->type.shape);
    return v.mul(y, v.sub(dy, s));
  });
}
void logSoftmaxVjp(Vjp& v, const Op& op, Value* dy) {
  Value* x = op.operands[0];
  v.give(op, 0, [&] {
    const int ax = normalizeAxis(op.attrInt("axis"), x->type.rank(), "log_softmax");
    Value* s = v.bcast(v.b.reduce(OpKind::Sum, dy, {ax}, true), x->type.shape);
    return v.sub(dy, v.mul(v.b.unary(OpKind::Exp, op.result()), s));
  });
}
void siluVjp(Vjp& v, const Op& op, Value* dy) {  // d/dx x s(x) = s (1 + x (1 - s))
  Value* x = op.operands[0];
  v.give(op, 0, [&] {
    Value* s = v.b.unary(OpKind::Sigmoid, x);
    Value* one = v.c(1, x);
    return v.mul(dy, v.mul(s, v.add(one, v.mul(x, v.sub(one, s)))));
  });
}

// "none": Phi(x) + x phi(x) with Phi(x) = (1 + erf(x / sqrt 2)) / 2, phi the normal pdf.
// "tanh": with u = k (x + 0.044715 x^3), t = tanh(u), k = sqrt(2/pi):
//         (1 + t) / 2 + x/2 (1 - t^2) k (1 + 3 * 0.044715 x^2).
Value* geluDerivative(Vjp& v, Value* x, const std::string& approximate) {
  const double pi = std::numbers::pi;
  Value* half = v.c(0.5, x);
  Value* one = v.c(1, x);
  Value* x2 = v.mul(x, x);
  if (approximate == "tanh") {
    const double k = std::sqrt(2 / pi), a = 0.044715;
    Value* t = v.b.unary(OpKind::Tanh, v.mul(v.c(k, x), v.add(x, v.mul(v.c(a, x), v.mul(x2, x)))));
    Value* dt = v.mul(v.sub(one, v.mul(t, t)), v.mul(v.c(k, x), v.add(one, v.mul(v.c(3 * a, x), x2))));
    return v.add(v.mul(half, v.add(one, t)), v.mul(v.mul(half, x), dt));
  }
  Value* cdf = v.mul(half, v.add(one, v.b.unary(OpKind::Erf, v.mul(x, v.c(1 / std::sqrt(2.0), x)))));
  Value* pdf = v.mul(v.c(1 / std::sqrt(2 * pi), x), v.b.unary(OpKind::Exp, v.mul(x2, v.c(-0.5, x))));
  return v.add(cdf, v.mul(x, pdf));
}
void geluVjp(Vjp& v, const Op& op, Value* dy) {
  v.give(op, 0, [&] { return v.mul(dy, geluDerivative(v, op.operands[0], op.attrStr("approximate"))); });
}

// y = xhat w + b with xhat = (x - mu) r, r = rsqrt(var + eps) per row (biased variance):
// dw = sum over rows of dy xhat, db = sum over rows of dy,
// dx = r (g - mean(g) - xhat mean(g xhat)) with g = dy w.
void layerNormVjp(Vjp& v, const Op& op, Value* dy) {
  Value *x = op.operands[0], *w = op.operands[1];
  const Shape& xs = x->type.shape;
  const int R = x->type.rank();
  auto rowMean = [&](Value* u) { return v.bcast(v.b.reduce(OpKind::Mean, u, {R - 1}, true), xs); };
  Value* xc = v.sub(x, rowMean(x));
  Value* var = v.b.reduce(OpKind::Mean, v.mul(xc, xc), {R - 1}, true);
  Value* r = v.bcast(v.b.unary(OpKind::Rsqrt, v.add(var, v.c(op.attrFloat("eps"), var))), xs);
  Value* xhat = v.mul(xc, r);
  v.give(op, 1, [&] { return v.sum(v.mul(dy, xhat), range(0, R - 1), false); });
  v.give(op, 2, [&] { return v.sum(dy, range(0, R - 1), false); });
  v.give(op, 0, [&] {
    Value* g = v.mul(dy, v.bcast(w, xs));
    return v.mul(r, v.sub(v.sub(g, rowMean(g)), v.mul(xhat, rowMean(v.mul(g, xhat)))));
  });
}

// y = x r g with r = rsqrt(mean(x^2) + eps) per row, xhat = x r:
// dg = sum over rows of dy xhat; dx = r (dy g - xhat mean(dy g xhat)).
void rmsNormVjp(Vjp& v, const Op& op, Value* dy) {
  Value *x = op.operands[0], *w = op.operands[1];
  const Shape& xs = x->type.shape;
  const int R = x->type.rank();
  Value* ms = v.b.reduce(OpKind::Mean, v.mul(x, x), {R - 1}, true);
  Value* r = v.bcast(v.b.unary(OpKind::Rsqrt, v.add(ms, v.c(op.attrFloat("eps"), ms))), xs);
  Value* xhat = v.mul(x, r);
  v.give(op, 1, [&] { return v.sum(v.mul(dy, xhat), range(0, R - 1), false); });
  v.give(op, 0, [&] {
    Value* gdy = v.mul(dy, v.bcast(w, xs));
    Value* m = v.bcast(v.b.reduce(OpKind::Mean, v.mul(gdy, xhat), {R - 1}, true), xs);
    return v.mul(r, v.sub(gdy, v.mul(xhat, m)));
  });
}

void ropeVjp(Vjp& v, const Op& op, Value* dy) {  // the inverse rotation: rope by -pos
  v.give(op, 0, [&] {
    return v.b.create1(OpKind::Rope, {dy, v.neg(op.operands[1])}, {{"theta", op.attrFloat("theta")}});
  });
}

// loss = mean over rows of logsumexp(row) - row[target]:
// d logits = (softmax(logits) - onehot(targets)) dloss / rows.
void crossEntropyVjp(Vjp& v, const Op& op, Value* dy) {
  v.give(op, 0, [&] {
    Value *logits = op.operands[0], *targets = op.operands[1];
    const Shape& s = logits->type.shape;
    const int R = logits->type.rank();
    Value* p = v.softmaxLast(logits);
    Shape ks = s;
    ks.back() = 1;
    Value* cls = v.b.iota(R - 1, Type{targets->type.dtype, s});
    Value* hot = v.b.binary(OpKind::Eq, cls, v.bcast(v.reshape(targets, ks), s));
    Value* diff = v.sel(hot, v.sub(p, v.c(1, p)), p);
    Value* scale = v.div(dy, v.c(double(targets->type.numel()), dy));
    return v.mul(diff, v.bcast(scale, s));
  });
}

// The attention_backward composite (ops.def) at dO: it reads the forward's o and lse (the
// row log-sum-exp), so the forward saves only those, never P. Unwanted gradients are
// computed anyway (one kernel gives all three) and left unused.
void attentionVjp(Vjp& v, const Op& op, Value* dO) {
  if (!v.wants(op, 0) && !v.wants(op, 1) && !v.wants(op, 2)) return;
  std::vector<Value*> operands = op.operands;
  operands.push_back(op.result(0));
  operands.push_back(dO);
  operands.push_back(op.result(1));
  std::vector<Value*> d = v.b.create(OpKind::AttentionBackward, operands,
                                     {{"causal", op.attrBool("causal")}, {"scale", op.attrFloat("scale")}});
  for (size_t i = 0; i < 3; ++i) v.give(op, i, [&] { return d[i]; });
}

void dropoutVjp(Vjp& v, const Op& op, Value* dy) {  // the same mask (regenerated from the same key and stream) on dy
  v.give(op, 0, [&] {
    return v.b.create1(OpKind::Dropout, {dy, op.operands[1]}, {{"p", op.attrFloat("p")}, {"stream", op.attrInt("stream")}});
  });
}

const std::unordered_map<OpKind, VjpEntry>& table() {
  using S = GradSlots;
  static const std::unordered_map<OpKind, VjpEntry> t = {
      // pointwise
      {OpKind::Neg, {S::All, negVjp}},
      {OpKind::Abs, {S::All, absVjp}},
      {OpKind::Relu, {S::All, reluVjp}},
      {OpKind::Exp, {S::All, expVjp}},
      {OpKind::Log, {S::All, logVjp}},
      {OpKind::Sqrt, {S::All, sqrtVjp}},
      {OpKind::Rsqrt, {S::All, rsqrtVjp}},
      {OpKind::Recip, {S::All, recipVjp}},
      {OpKind::Tanh, {S::All, tanhVjp}},
      {OpKind::Sin, {S::All, sinVjp}},
      {OpKind::Cos, {S::All, cosVjp}},
      {OpKind::Sigmoid, {S::All, sigmoidVjp}},
      {OpKind::Erf, {S::All, erfVjp}},
      {OpKind::Add, {S::All, addVjp}},
      {OpKind::Sub, {S::All, subVjp}},
      {OpKind::Mul, {S::All, mulVjp}},
      {OpKind::Div, {S::All, divVjp}},
      {OpKind::Max, {S::All, maxMinVjp}},
      {OpKind::Min, {S::All, maxMinVjp}},
      {OpKind::Pow, {S::All, powVjp}},
      {OpKind::Select, {S::AllButFirst, selectVjp}},
      {OpKind::Cast, {S::All, castVjp}},
      {OpKind::Not, {S::None, nullptr}},
      {OpKind::And, {S::None, nullptr}},
      {OpKind::Or, {S::None, nullptr}},
      {OpKind::Eq, {S::None, nullptr}},
      {OpKind::Ne, {S::None, nullptr}},
      {OpKind::Lt, {S::None, nullptr}},
      {OpKind::Le, {S::None, nullptr}},
      {OpKind::Gt, {S::None, nullptr}},
      {OpKind::Ge, {S::None, nullptr}},
      {OpKind::StopGradient, {S::None, nullptr}},
      {OpKind::Uniform, {S::None, nullptr}},  // integer operands: a random number is no function of a value's gradient
      // reductions
      {OpKind::Sum, {S::All, sumVjp}},
      {OpKind::Mean, {S::All, meanVjp}},
      {OpKind::RMax, {S::All, extremumVjp}},
      {OpKind::RMin, {S::All, extremumVjp}},
      // layout
      {OpKind::Reshape, {S::All, reshapeVjp}},
      {OpKind::Permute, {S::All, permuteVjp}},
      {OpKind::Broadcast, {S::All, broadcastVjp}},
      {OpKind::Slice, {S::All, sliceVjp}},
      {OpKind::Concat, {S::All, concatVjp}},
      {OpKind::Gather, {S::OnlyFirst, gatherVjp}},
      {OpKind::ScatterAdd, {S::AllButSecond, scatterAddVjp}},
      // matmul
      {OpKind::Matmul, {S::All, matmulVjp}},
      // composites
      {OpKind::Softmax, {S::All, softmaxVjp}},
      {OpKind::LogSoftmax, {S::All, logSoftmaxVjp}},
      {OpKind::Silu, {S::All, siluVjp}},
      {OpKind::Gelu, {S::All, geluVjp}},
      {OpKind::RMSNorm, {S::All, rmsNormVjp}},
      {OpKind::LayerNorm, {S::All, layerNormVjp}},
      {OpKind::Rope, {S::OnlyFirst, ropeVjp}},
      {OpKind::CrossEntropy, {S::OnlyFirst, crossEntropyVjp}},
      {OpKind::Attention, {S::All, attentionVjp}},
      {OpKind::Dropout, {S::OnlyFirst, dropoutVjp}},
  };
  return t;
}

}  // namespace

const VjpEntry& vjpEntry(OpKind k) {
  static const VjpEntry none;
  auto it = table().find(k);
  return it == table().end() ? none : it->second;
}

bool carriesGradient(const Op& op, size_t i) {
  switch (vjpEntry(op.kind).slots) {
    case GradSlots::All: return true;
    case GradSlots::None: return false;
    case GradSlots::AllButFirst: return i != 0;
    case GradSlots::OnlyFirst: return i == 0;
    case GradSlots::AllButSecond: return i != 1;
  }
  return true;
}

}  // namespace fusec
