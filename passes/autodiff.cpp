// Reverse-mode automatic differentiation (see passes/autodiff.h).
//
// A value carries a gradient when it lies on a path from some `wrt` value to the loss through
// differentiable operand slots: not select's condition, gather's and scatter_add's index,
// rope's positions or cross_entropy's targets; compare and bool ops pass none (their results
// are constants to the gradient), nor does stop_gradient (that is its purpose). The ops defining such values are visited in reverse
// topological order, and each adds the vector-Jacobian product of its result's adjoint to
// the adjoints of its differentiable operands (fan-out accumulates with add). Every VJP is
// built with the Builder from primitive ops, appended at the end of the graph; the one
// exception is rope, whose VJP is rope by the negated positions (the inverse rotation, exact).
// Matmul VJPs stay GEMM-shaped: transposes are matmul flags, never materialised.
#include "passes/autodiff.h"

#include <cmath>
#include <cstdlib>
#include <optional>
#include <limits>
#include <numbers>
#include <numeric>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "ir/builder.h"
#include "ir/op_table.h"
#include "ir/type_rules.h"
#include "support/ptr_hash.h"

namespace fusec {
namespace {

// Whether operand `i` of `op` can carry a gradient.
bool diffSlot(const Op& op, size_t i) {
  switch (op.kind) {
    case OpKind::Select: return i != 0;
    case OpKind::Gather: return i == 0;
    case OpKind::ScatterAdd: return i != 1;
    case OpKind::Rope:
    case OpKind::Dropout:  // not its key
    case OpKind::CrossEntropy: return i == 0;
    case OpKind::Uniform:  // integer operands: a random number is no function of a value's gradient
    case OpKind::StopGradient:
    case OpKind::Not:
    case OpKind::And:
    case OpKind::Or:
    case OpKind::Eq:
    case OpKind::Ne:
    case OpKind::Lt:
    case OpKind::Le:
    case OpKind::Gt:
    case OpKind::Ge: return false;
    default: return true;
  }
}

std::string opName(const Op& op) { return std::string(op.info().name); }

std::vector<int64_t> range(int64_t from, int64_t to) {
  std::vector<int64_t> r;
  for (int64_t i = from; i < to; ++i) r.push_back(i);
  return r;
}

class Autodiff {
 public:
  Autodiff(Graph& g, PtrSet<const Value*> needed) : b_(g), needed_(std::move(needed)) {
    // A test's planted fault (tests/python/export_verify_test.py): FUSEC_TEST_WRONG_VJP=OP
    // doubles every VJP of op OP, so that the checks downstream (the exporter's gradient
    // check) are shown to catch a wrong derivative rule. Unset, nothing changes.
    if (const char* name = std::getenv("FUSEC_TEST_WRONG_VJP"); name && *name)
      if (const OpInfo* info = findOp(name)) planted_ = info->kind;
  }

  void seed(Value* loss) { adj_[loss] = b_.constant(1.0, loss->type); }

  Value* adjoint(const Value* v) const {
    auto it = adj_.find(v);
    return it == adj_.end() ? nullptr : it->second;
  }

  Value* zeros(const Type& t) { return b_.constant(0.0, t); }

  // Adds the VJPs of `op` (whose result has adjoint `dy`) to its operands' adjoints.
  void backprop(const Op& op, Value* dy) {
    if (op.kind == OpKind::Kernel)
      throw Error("autodiff: kernel '" + op.attrStr("name") + "' on the path to the loss has no derivative");
    for (size_t i = 0; i < op.operands.size(); ++i)
      if (wants(op, i) && !isFloat(op.operands[i]->type.dtype))
        throw Error("autodiff: '" + opName(op) + "' has no derivative with respect to its operand " +
                    std::to_string(i) + " of type " + op.operands[i]->type.str() +
                    " (an integer-valued path to the loss)");
    if (!isFloat(op.result()->type.dtype))
      throw Error("autodiff: '" + opName(op) + "' has no derivative: its result " + op.result()->type.str() +
                  " is not a float type (an integer-valued path to the loss)");
    switch (op.info().category) {
      case OpCategory::Pointwise: return pointwise(op, dy);
      case OpCategory::Reduction: return reduction(op, dy);
      case OpCategory::Layout: return layout(op, dy);
      case OpCategory::Matmul: return matmul(op, dy);
      case OpCategory::Composite: return composite(op, dy);
      default: break;
    }
    throw Error("autodiff: '" + opName(op) + "' has no derivative");
  }

 private:
  std::optional<OpKind> planted_;  // FUSEC_TEST_WRONG_VJP's op, if any
  bool wants(const Op& op, size_t i) const { return diffSlot(op, i) && needed_.count(op.operands[i]) != 0; }

  void accumulate(Value* v, Value* d) {
    auto [it, inserted] = adj_.try_emplace(v, d);
    if (!inserted) it->second = add(it->second, d);
  }
  // Adds make() to the adjoint of operand i, building it only if that operand is needed.
  template <class F>
  void give(const Op& op, size_t i, F&& make) {
    if (!wants(op, i)) return;
    Value* d = make();
    accumulate(op.operands[i], planted_ == op.kind ? add(d, d) : d);
  }

  // ---- building blocks
  Value* c(double v, const Value* like) { return b_.constant(v, like->type); }
  Value* add(Value* a, Value* b) { return b_.binary(OpKind::Add, a, b); }
  Value* sub(Value* a, Value* b) { return b_.binary(OpKind::Sub, a, b); }
  Value* mul(Value* a, Value* b) { return b_.binary(OpKind::Mul, a, b); }
  Value* div(Value* a, Value* b) { return b_.binary(OpKind::Div, a, b); }
  Value* neg(Value* a) { return b_.unary(OpKind::Neg, a); }
  Value* sel(Value* cond, Value* a, Value* b) { return b_.select(cond, a, b); }
  Value* reshape(Value* v, const Shape& s) { return v->type.shape == s ? v : b_.reshape(v, s); }
  Value* bcast(Value* v, const Shape& s) { return v->type.shape == s ? v : b_.broadcast(v, s); }
  Value* sum(Value* v, std::vector<int64_t> axes, bool keepdim) {
    return axes.empty() ? v : b_.reduce(OpKind::Sum, v, std::move(axes), keepdim);
  }
  Value* mm(Value* a, Value* b, bool ta, bool tb) { return b_.matmul(a, b, ta, tb); }

  // Sum over the last axis, kept as size 1, broadcast back.
  Value* rowSum(Value* v) {
    int r = v->type.rank();
    return bcast(b_.reduce(OpKind::Sum, v, {r - 1}, true), v->type.shape);
  }
  // Softmax over the last axis, in primitives (max-subtracted).
  Value* softmaxLast(Value* x) {
    int r = x->type.rank();
    Value* m = bcast(b_.reduce(OpKind::RMax, x, {r - 1}, true), x->type.shape);
    Value* e = b_.unary(OpKind::Exp, sub(x, m));
    return div(e, rowSum(e));
  }

  static std::vector<int64_t> normAxes(const Op& op, int rank) {
    std::vector<int64_t> axes;
    for (int64_t a : op.attrInts("axes")) axes.push_back(normalizeAxis(a, rank, op.info().name.data()));
    return axes;
  }
  static Shape keepShape(const Shape& s, const std::vector<int64_t>& axes) {
    Shape k = s;
    for (int64_t a : axes) k[size_t(a)] = 1;
    return k;
  }

  // ---- pointwise
  void pointwise(const Op& op, Value* dy) {
    Value* y = op.result();
    Value* a = op.operands[0];
    Value* b = op.operands.size() > 1 ? op.operands[1] : nullptr;
    auto zero = [&] { return c(0, dy); };
    auto one = [&] { return c(1, dy); };
    switch (op.kind) {
      case OpKind::Neg: return give(op, 0, [&] { return neg(dy); });
      case OpKind::Abs:  // sign(a) * dy, sign(0) = 0
        return give(op, 0, [&] {
          return sel(b_.binary(OpKind::Gt, a, zero()), dy, sel(b_.binary(OpKind::Lt, a, zero()), neg(dy), zero()));
        });
      case OpKind::Relu: return give(op, 0, [&] { return sel(b_.binary(OpKind::Gt, a, zero()), dy, zero()); });
      case OpKind::Exp: return give(op, 0, [&] { return mul(dy, y); });
      case OpKind::Log: return give(op, 0, [&] { return div(dy, a); });
      case OpKind::Sqrt: return give(op, 0, [&] { return div(mul(dy, c(0.5, dy)), y); });
      case OpKind::Rsqrt:  // d/da a^(-1/2) = -1/2 * y / a
        return give(op, 0, [&] { return mul(dy, mul(c(-0.5, dy), div(y, a))); });
      case OpKind::Recip: return give(op, 0, [&] { return neg(mul(dy, mul(y, y))); });
      case OpKind::Tanh: return give(op, 0, [&] { return mul(dy, sub(one(), mul(y, y))); });
      case OpKind::Sin: return give(op, 0, [&] { return mul(dy, b_.unary(OpKind::Cos, a)); });
      case OpKind::Cos: return give(op, 0, [&] { return neg(mul(dy, b_.unary(OpKind::Sin, a))); });
      case OpKind::Sigmoid: return give(op, 0, [&] { return mul(dy, mul(y, sub(one(), y))); });
      case OpKind::Erf:  // 2/sqrt(pi) exp(-a^2)
        return give(op, 0, [&] {
          return mul(dy, mul(c(2 / std::sqrt(std::numbers::pi), a), b_.unary(OpKind::Exp, neg(mul(a, a)))));
        });
      case OpKind::Add:
        give(op, 0, [&] { return dy; });
        return give(op, 1, [&] { return dy; });
      case OpKind::Sub:
        give(op, 0, [&] { return dy; });
        return give(op, 1, [&] { return neg(dy); });
      case OpKind::Mul:
        give(op, 0, [&] { return mul(dy, b); });
        return give(op, 1, [&] { return mul(dy, a); });
      case OpKind::Div:  // d/db a/b = -y/b
        give(op, 0, [&] { return div(dy, b); });
        return give(op, 1, [&] { return neg(div(mul(dy, y), b)); });
      case OpKind::Max:
      case OpKind::Min: {  // ties go to the first operand
        Value* first = b_.binary(op.kind == OpKind::Max ? OpKind::Ge : OpKind::Le, a, b);
        give(op, 0, [&] { return sel(first, dy, zero()); });
        return give(op, 1, [&] { return sel(first, zero(), dy); });
      }
      case OpKind::Pow:
        give(op, 0, [&] { return mul(dy, mul(b, b_.binary(OpKind::Pow, a, sub(b, one())))); });
        return give(op, 1, [&] { return mul(dy, mul(y, b_.unary(OpKind::Log, a))); });
      case OpKind::Select: {
        Value* cond = a;
        give(op, 1, [&] { return sel(cond, dy, zero()); });
        return give(op, 2, [&] { return sel(cond, zero(), dy); });
      }
      case OpKind::Cast:
        return give(op, 0, [&] { return a->type.dtype == dy->type.dtype ? dy : b_.cast(dy, a->type.dtype); });
      default: break;
    }
    throw Error("autodiff: '" + opName(op) + "' has no derivative");
  }

  // ---- reductions
  void reduction(const Op& op, Value* dy) {
    Value* x = op.operands[0];
    const Shape& xs = x->type.shape;
    std::vector<int64_t> axes = normAxes(op, x->type.rank());
    Shape ks = keepShape(xs, axes);
    switch (op.kind) {
      case OpKind::Sum: return give(op, 0, [&] { return bcast(reshape(dy, ks), xs); });
      case OpKind::Mean:
        return give(op, 0, [&] {
          int64_t count = 1;
          for (int64_t a : axes) count *= xs[size_t(a)];
          Value* d = reshape(dy, ks);
          return bcast(div(d, c(double(count), d)), xs);
        });
      case OpKind::RMax:
      case OpKind::RMin:  // to the arg positions, split evenly between ties (as torch.amax)
        return give(op, 0, [&] {
          Value* hit = b_.binary(OpKind::Eq, x, bcast(reshape(op.result(), ks), xs));
          Value* ties = sum(sel(hit, c(1, x), c(0, x)), axes, true);
          Value* d = div(reshape(dy, ks), ties);
          return sel(hit, bcast(d, xs), c(0, x));
        });
      default: break;
    }
    throw Error("autodiff: '" + opName(op) + "' has no derivative");
  }

  // ---- layout
  void layout(const Op& op, Value* dy) {
    Value* x = op.operands[0];
    const Shape& xs = x->type.shape;
    const Shape& ys = dy->type.shape;
    switch (op.kind) {
      case OpKind::Reshape: return give(op, 0, [&] { return reshape(dy, xs); });
      case OpKind::Permute:
        return give(op, 0, [&] {
          const auto& perm = op.attrInts("perm");
          std::vector<int64_t> inv(perm.size());
          for (size_t i = 0; i < perm.size(); ++i) inv[size_t(perm[i])] = int64_t(i);
          return b_.permute(dy, inv);
        });
      case OpKind::Broadcast:  // sum over the added leading dims and the dims that were 1
        return give(op, 0, [&] {
          int off = int(ys.size() - xs.size());
          std::vector<int64_t> axes = range(0, off);
          for (int d = 0; d < int(xs.size()); ++d)
            if (xs[size_t(d)] == 1 && ys[size_t(d + off)] != 1) axes.push_back(d + off);
          return reshape(sum(dy, axes, false), xs);
        });
      case OpKind::Slice: return give(op, 0, [&] { return sliceVJP(op, dy); });
      case OpKind::Concat: {
        int ax = normalizeAxis(op.attrInt("axis"), dy->type.rank(), "concat");
        int64_t at = 0;
        for (size_t i = 0; i < op.operands.size(); ++i) {
          int64_t len = op.operands[i]->type.shape[size_t(ax)];
          give(op, i, [&] { return len == ys[size_t(ax)] ? dy : b_.slice(dy, ax, at, at + len); });
          at += len;
        }
        return;
      }
      case OpKind::Gather:
        return give(op, 0, [&] { return b_.scatterAdd(zeros(x->type), op.operands[1], dy, op.attrInt("axis")); });
      case OpKind::ScatterAdd:
        give(op, 0, [&] { return dy; });
        return give(op, 2, [&] { return b_.gather(dy, op.operands[1], op.attrInt("axis")); });
      default: break;
    }
    throw Error("autodiff: '" + opName(op) + "' has no derivative");
  }

  // The adjoint of a slice scattered back into zeros of the operand's shape. A strided slice
  // interleaves step-1 zeros after each element ([.., n, 1, ..] ++ zeros [.., n, step-1, ..],
  // reshaped to [.., n*step, ..]), then both cases pad with zeros before `start` and after.
  Value* sliceVJP(const Op& op, Value* dy) {
    const Type& xt = op.operands[0]->type;
    const Shape& ys = dy->type.shape;
    int ax = normalizeAxis(op.attrInt("axis"), xt.rank(), "slice");
    int64_t start = op.attrInt("start"), step = op.attrInt("step"), dim = xt.shape[size_t(ax)], n = ys[size_t(ax)];
    if (n == 0) return zeros(xt);
    auto zerosAlong = [&](int64_t len, Shape s, int axis) {
      s[size_t(axis)] = len;
      return zeros(Type{xt.dtype, std::move(s)});
    };
    Value* d = dy;
    if (step > 1 && n > 1) {  // one element taken: a plain slice of it (step - 1 zeros could be huge)
      Shape s1 = ys;
      s1.insert(s1.begin() + ax + 1, 1);
      Value* spread = b_.concat({reshape(dy, s1), zerosAlong(step - 1, s1, ax + 1)}, ax + 1);
      Shape s2 = ys;
      s2[size_t(ax)] = n * step;
      d = reshape(spread, s2);
    }
    int64_t covered = d->type.shape[size_t(ax)], tail = dim - start;
    if (covered > tail) d = b_.slice(d, ax, 0, tail);
    std::vector<Value*> parts;
    if (start > 0) parts.push_back(zerosAlong(start, ys, ax));
    parts.push_back(d);
    if (covered < tail) parts.push_back(zerosAlong(tail - covered, ys, ax));
    return parts.size() == 1 ? d : b_.concat(parts, ax);
  }

  // ---- matmul: C = op(A) op(B), op(X) = X^T under its transpose flag.
  // d op(A) = dC op(B)^T and d op(B) = op(A)^T dC; a stored-transposed operand's gradient is
  // the transpose of that product, which is again one matmul with swapped operands.
  void matmul(const Op& op, Value* dC) {
    Value *A = op.operands[0], *B = op.operands[1];
    // An out_dtype matmul is matmul-then-cast: dC narrows back as a cast's VJP would.
    if (dC->type.dtype != A->type.dtype) dC = b_.cast(dC, A->type.dtype);
    // dC arrives in the out_perm layout: back to the logical [batch..., M, N] first.
    if (const auto& outPerm = op.attrInts("out_perm"); !outPerm.empty()) {
      std::vector<int64_t> inv(outPerm.size());
      for (size_t i = 0; i < outPerm.size(); ++i) inv[size_t(outPerm[i])] = int64_t(i);
      dC = b_.permute(dC, inv);
    }
    const bool ta = op.attrBool("transpose_a"), tb = op.attrBool("transpose_b");
    const int ra = A->type.rank(), rb = B->type.rank();
    give(op, 0, [&] {
      Value* d = ta ? mm(B, dC, tb, true) : mm(dC, B, false, !tb);
      return ra == 2 && rb > 2 ? sum(d, range(0, rb - 2), false) : d;  // A shared across B's batch
    });
    give(op, 1, [&] {
      if (rb == 2 && ra > 2 && !ta) {
        // B shared across A's batch: fold the batch into A's rows, one GEMM over all of them.
        const Shape& as = A->type.shape;
        int64_t rows = A->type.numel() / as.back();
        Value* A2 = reshape(A, {rows, as.back()});
        Value* dC2 = reshape(dC, {rows, dC->type.shape.back()});
        return tb ? mm(dC2, A2, true, false) : mm(A2, dC2, true, false);
      }
      Value* d = tb ? mm(dC, A, true, ta) : mm(A, dC, !ta, false);
      return rb == 2 && ra > 2 ? sum(d, range(0, ra - 2), false) : d;
    });
  }

  // ---- composites, in primitives
  void composite(const Op& op, Value* dy) {
    Value* x = op.operands[0];
    Value* y = op.result();
    const Shape& xs = x->type.shape;
    switch (op.kind) {
      case OpKind::Softmax:
        return give(op, 0, [&] {
          int ax = normalizeAxis(op.attrInt("axis"), x->type.rank(), "softmax");
          Value* s = bcast(b_.reduce(OpKind::Sum, mul(dy, y), {ax}, true), xs);
          return mul(y, sub(dy, s));
        });
      case OpKind::LogSoftmax:
        return give(op, 0, [&] {
          int ax = normalizeAxis(op.attrInt("axis"), x->type.rank(), "log_softmax");
          Value* s = bcast(b_.reduce(OpKind::Sum, dy, {ax}, true), xs);
          return sub(dy, mul(b_.unary(OpKind::Exp, y), s));
        });
      case OpKind::Silu:  // d/dx x s(x) = s (1 + x (1 - s))
        return give(op, 0, [&] {
          Value* s = b_.unary(OpKind::Sigmoid, x);
          Value* one = c(1, x);
          return mul(dy, mul(s, add(one, mul(x, sub(one, s)))));
        });
      case OpKind::Gelu: return give(op, 0, [&] { return mul(dy, geluDerivative(x, op.attrStr("approximate"))); });
      case OpKind::RMSNorm: return rmsnorm(op, dy);
      case OpKind::LayerNorm: return layernorm(op, dy);
      case OpKind::Rope:  // the inverse rotation: rope by -pos
        return give(op, 0, [&] {
          Value* negPos = neg(op.operands[1]);
          return b_.create1(OpKind::Rope, {dy, negPos}, {{"theta", op.attrFloat("theta")}});
        });
      case OpKind::CrossEntropy: return crossEntropy(op, dy);
      case OpKind::Attention: return attention(op, dy);
      case OpKind::Dropout:  // the same mask (regenerated from the same key and stream) on dy
        return give(op, 0, [&] {
          return b_.create1(OpKind::Dropout, {dy, op.operands[1]},
                            {{"p", op.attrFloat("p")}, {"stream", op.attrInt("stream")}});
        });
      default: break;
    }
    throw Error("autodiff: '" + opName(op) + "' has no derivative");
  }

  // "none": Phi(x) + x phi(x) with Phi(x) = (1 + erf(x / sqrt 2)) / 2, phi the normal pdf.
  // "tanh": with u = k (x + 0.044715 x^3), t = tanh(u), k = sqrt(2/pi):
  //         (1 + t) / 2 + x/2 (1 - t^2) k (1 + 3 * 0.044715 x^2).
  Value* geluDerivative(Value* x, const std::string& approximate) {
    const double pi = std::numbers::pi;
    Value* half = c(0.5, x);
    Value* one = c(1, x);
    Value* x2 = mul(x, x);
    if (approximate == "tanh") {
      const double k = std::sqrt(2 / pi), a = 0.044715;
      Value* t = b_.unary(OpKind::Tanh, mul(c(k, x), add(x, mul(c(a, x), mul(x2, x)))));
      Value* dt = mul(sub(one, mul(t, t)), mul(c(k, x), add(one, mul(c(3 * a, x), x2))));
      return add(mul(half, add(one, t)), mul(mul(half, x), dt));
    }
    Value* cdf = mul(half, add(one, b_.unary(OpKind::Erf, mul(x, c(1 / std::sqrt(2.0), x)))));
    Value* pdf = mul(c(1 / std::sqrt(2 * pi), x), b_.unary(OpKind::Exp, mul(x2, c(-0.5, x))));
    return add(cdf, mul(x, pdf));
  }

  // y = xhat w + b with xhat = (x - mu) r, r = rsqrt(var + eps) per row (biased variance):
  // dw = sum over rows of dy xhat, db = sum over rows of dy,
  // dx = r (g - mean(g) - xhat mean(g xhat)) with g = dy w.
  void layernorm(const Op& op, Value* dy) {
    Value *x = op.operands[0], *w = op.operands[1];
    const Shape& xs = x->type.shape;
    const int R = x->type.rank();
    auto rowMean = [&](Value* v) { return bcast(b_.reduce(OpKind::Mean, v, {R - 1}, true), xs); };
    Value* xc = sub(x, rowMean(x));
    Value* var = b_.reduce(OpKind::Mean, mul(xc, xc), {R - 1}, true);
    Value* r = bcast(b_.unary(OpKind::Rsqrt, add(var, c(op.attrFloat("eps"), var))), xs);
    Value* xhat = mul(xc, r);
    give(op, 1, [&] { return sum(mul(dy, xhat), range(0, R - 1), false); });
    give(op, 2, [&] { return sum(dy, range(0, R - 1), false); });
    give(op, 0, [&] {
      Value* g = mul(dy, bcast(w, xs));
      return mul(r, sub(sub(g, rowMean(g)), mul(xhat, rowMean(mul(g, xhat)))));
    });
  }

  // y = x r g with r = rsqrt(mean(x^2) + eps) per row, xhat = x r:
  // dg = sum over rows of dy xhat; dx = r (dy g - xhat mean(dy g xhat)).
  void rmsnorm(const Op& op, Value* dy) {
    Value *x = op.operands[0], *w = op.operands[1];
    const Shape& xs = x->type.shape;
    const int R = x->type.rank();
    Value* ms = b_.reduce(OpKind::Mean, mul(x, x), {R - 1}, true);
    Value* r = bcast(b_.unary(OpKind::Rsqrt, add(ms, c(op.attrFloat("eps"), ms))), xs);
    Value* xhat = mul(x, r);
    give(op, 1, [&] { return sum(mul(dy, xhat), range(0, R - 1), false); });
    give(op, 0, [&] {
      Value* gdy = mul(dy, bcast(w, xs));
      Value* m = bcast(b_.reduce(OpKind::Mean, mul(gdy, xhat), {R - 1}, true), xs);
      return mul(r, sub(gdy, mul(xhat, m)));
    });
  }

  // loss = mean over rows of logsumexp(row) - row[target]:
  // d logits = (softmax(logits) - onehot(targets)) dloss / rows.
  void crossEntropy(const Op& op, Value* dy) {
    give(op, 0, [&] {
      Value *logits = op.operands[0], *targets = op.operands[1];
      const Shape& s = logits->type.shape;
      const int R = logits->type.rank();
      Value* p = softmaxLast(logits);
      Shape ks = s;
      ks.back() = 1;
      Value* cls = b_.iota(R - 1, Type{targets->type.dtype, s});
      Value* hot = b_.binary(OpKind::Eq, cls, bcast(reshape(targets, ks), s));
      Value* diff = sel(hot, sub(p, c(1, p)), p);
      Value* scale = div(dy, c(double(targets->type.numel()), dy));
      return mul(diff, bcast(scale, s));
    });
  }

  // The attention_backward composite (ops.def) at dO: it reads the forward's o and lse (the
  // row log-sum-exp), so the forward saves only those, never P. Unwanted gradients are
  // computed anyway (one kernel gives all three) and left unused.
  void attention(const Op& op, Value* dO) {
    if (!wants(op, 0) && !wants(op, 1) && !wants(op, 2)) return;
    std::vector<Value*> operands = op.operands;
    operands.push_back(op.result(0));
    operands.push_back(dO);
    operands.push_back(op.result(1));
    std::vector<Value*> d = b_.create(OpKind::AttentionBackward, operands,
                                      {{"causal", op.attrBool("causal")}, {"scale", op.attrFloat("scale")}});
    for (size_t i = 0; i < 3; ++i) give(op, i, [&] { return d[i]; });
  }

  Builder b_;
  PtrSet<const Value*> needed_;
  PtrMap<const Value*, Value*> adj_;
};

}  // namespace

std::vector<Value*> appendGradients(Graph& g, Value* loss, const std::vector<Value*>& wrt) {
  if (!loss) throw Error("autodiff: the loss is null");
  if (loss->type.rank() != 0 || !isFloat(loss->type.dtype))
    throw Error("autodiff: the loss must be a float scalar, got " + loss->type.str());
  std::vector<Op*> ops;
  PtrSet<const Op*> inGraph;
  ops.reserve(g.ops.size());
  for (auto& op : g.ops) {
    ops.push_back(op.get());
    inGraph.insert(op.get());
  }
  if (!inGraph.count(loss->def)) throw Error("autodiff: the loss is not defined in graph '" + g.name + "'");
  for (size_t i = 0; i < wrt.size(); ++i)
    if (!wrt[i] || !inGraph.count(wrt[i]->def))
      throw Error("autodiff: wrt value " + std::to_string(i) + " is not defined in graph '" + g.name + "'");

  // Needed: reachable from a wrt value (forward) and reaching the loss (backward), both
  // through differentiable operand slots only.
  PtrSet<const Value*> fromWrt(wrt.begin(), wrt.end());
  for (Op* op : ops) {
    bool reached = false;
    for (size_t i = 0; i < op->operands.size() && !reached; ++i)
      reached = diffSlot(*op, i) && fromWrt.count(op->operands[i]);
    if (reached)
      for (auto& r : op->results) fromWrt.insert(r.get());
  }
  PtrSet<const Value*> toLoss{loss}, needed;
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
    Op* op = *it;
    bool reaches = false;
    for (auto& r : op->results) reaches = reaches || toLoss.count(r.get());
    if (!reaches) continue;
    for (size_t i = 0; i < op->operands.size(); ++i)
      if (diffSlot(*op, i)) toLoss.insert(op->operands[i]);
  }
  for (const Value* v : toLoss)
    if (fromWrt.count(v)) needed.insert(v);

  Autodiff ad(g, needed);
  if (needed.count(loss)) {
    ad.seed(loss);
    for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
      const Op& op = **it;
      if (op.operands.empty()) continue;
      Value* dy = nullptr;
      bool isNeeded = false;
      for (auto& r : op.results) isNeeded = isNeeded || needed.count(r.get());
      if (!isNeeded) continue;
      if (op.kind != OpKind::Kernel) dy = ad.adjoint(op.result());
      if (op.kind != OpKind::Kernel && !dy) continue;
      ad.backprop(op, dy);
    }
  }

  std::vector<Value*> grads;
  grads.reserve(wrt.size());
  for (Value* w : wrt) {
    Value* d = ad.adjoint(w);
    grads.push_back(d ? d : ad.zeros(w->type));
  }
  return grads;
}

}  // namespace fusec
