// Decompose: every Composite op (ops.def) becomes primitives, at its place in the graph and
// inside kernel bodies, so that autocast and fusion see through it and autodiff of the
// result is exact. The expansions are chosen for what comes after:
//   * normalisations are row reductions along one axis plus pointwise ops and explicit
//     broadcasts of the row values (fusion's row_reduce family);
//   * the softmax max-subtraction goes through stop_gradient: softmax is shift-invariant,
//     so its gradient is zero anyway, and without it autodiff would emit the reduce_max
//     tie-splitting VJP for nothing (canonicalize removes the stop after autodiff);
//   * cross_entropy picks the target logit with a one-hot select, not a gather, so that its
//     gradient stays pointwise (no scatter);
//   * attention is exactly the formulation of its VJP in autodiff.cpp.
// Every value keeps the composite's dtype (constants are splats of it), except the rope
// angles, which are computed in f32 as the interpreter does (positions reach ~1e4, far
// beyond bf16 precision) and cast once.
#include <cmath>
#include <limits>
#include <numbers>
#include <unordered_map>
#include <unordered_set>

#include "ir/builder.h"
#include "ir/type_rules.h"
#include "passes/decompose.h"
#include "passes/pass.h"
#include "support/ptr_hash.h"

namespace fusec {
namespace {

class Expander {
 public:
  // `softmaxComposite`: attention's softmax stays a `softmax` op (decompose-attention).
  Expander(Builder& b, bool softmaxComposite) : b_(b), softmaxComposite_(softmaxComposite) {}

  // The primitives computing `op`'s result from its operands, appended to the graph. Every
  // op is created in its own statement: argument evaluation order is unspecified in C++,
  // and the printed IR must not depend on the compiler.
  // `used`: whether each result is read (attention's lse is expanded only then).
  std::vector<Value*> expandAll(const Op& op, const std::vector<bool>& used) {
    const std::vector<Value*>& in = op.operands;
    switch (op.kind) {
      case OpKind::Attention:
        return attention(in[0], in[1], in[2], op.attrBool("causal"), op.attrFloat("scale"), used.at(1));
      case OpKind::AttentionBackward: return attentionBackward(op);
      default: return {expand(op)};
    }
  }

 private:
  Value* expand(const Op& op) {
    const std::vector<Value*>& in = op.operands;
    Value* x = in[0];
    switch (op.kind) {
      case OpKind::Softmax: return softmax(x, axisOf(op, x));
      case OpKind::LogSoftmax: return logSoftmax(x, axisOf(op, x));
      case OpKind::Silu: {
        Value* s = un(OpKind::Sigmoid, x);
        return mul(x, s);
      }
      case OpKind::Gelu: return gelu(x, op.attrStr("approximate"));
      case OpKind::RMSNorm: {
        Value* sq = mul(x, x);
        Value* r = bcast(invStd(rowMean(sq), op.attrFloat("eps")), x);
        Value* xr = mul(x, r);
        return mul(xr, bcast(in[1], x));
      }
      case OpKind::LayerNorm: {
        Value* mu = bcast(rowMean(x), x);
        Value* xc = sub(x, mu);
        Value* sq = mul(xc, xc);
        Value* r = bcast(invStd(rowMean(sq), op.attrFloat("eps")), x);
        Value* xr = mul(xc, r);
        Value* scaled = mul(xr, bcast(in[1], x));
        return add(scaled, bcast(in[2], x));
      }
      case OpKind::Rope: return rope(x, in[1], op.attrFloat("theta"));
      case OpKind::CrossEntropy: return crossEntropy(x, in[1]);
      case OpKind::Dropout: return dropout(x, in[1], op.attrFloat("p"), op.attrInt("stream"));
      default: break;
    }
    throw Error("decompose: no decomposition for '" + std::string(op.info().name) + "'");
  }

  // x * keep / (1 - p), keep = uniform(flat index, key, stream) >= p: the flat index from an
  // iota per axis (index arithmetic inside the fused kernel), the key broadcast.
  Value* dropout(Value* x, Value* key, double p, int64_t stream) {
    if (p == 0) return x;
    const Shape& s = x->type.shape;
    const Type index{DType::i64, s};
    Value* flat = nullptr;
    int64_t stride = 1;
    for (int axis = x->type.rank() - 1; axis >= 0; --axis) {
      Value* term = b_.iota(axis, index);
      if (stride != 1) {
        Value* k = b_.constant(double(stride), index);
        term = mul(term, k);
      }
      flat = flat ? add(flat, term) : term;
      stride *= s[size_t(axis)];
    }
    if (!flat) flat = b_.constant(0, index);  // a scalar: element 0
    Value* keyAll = key;
    if (x->type.rank() > 0) {
      Value* unit = b_.reshape(key, Shape(s.size(), 1));
      keyAll = b_.broadcast(unit, s);
    }
    Value* streamAll = b_.constant(double(stream), index);
    Value* u = b_.create1(OpKind::Uniform, {flat, keyAll, streamAll});
    Value* pAll = b_.constant(p, u->type);
    Value* keep = b_.binary(OpKind::Ge, u, pAll);
    Value* scaled = mulC(x, 1.0 / (1.0 - p));
    Value* zero = c(0, x);
    return b_.select(keep, scaled, zero);
  }

  Value* c(double v, const Value* like) { return b_.constant(v, like->type); }
  Value* un(OpKind k, Value* a) { return b_.unary(k, a); }
  Value* add(Value* a, Value* b) { return b_.binary(OpKind::Add, a, b); }
  Value* sub(Value* a, Value* b) { return b_.binary(OpKind::Sub, a, b); }
  Value* mul(Value* a, Value* b) { return b_.binary(OpKind::Mul, a, b); }
  Value* div(Value* a, Value* b) { return b_.binary(OpKind::Div, a, b); }
  // v * constant k, k created first.
  Value* mulC(Value* v, double k) {
    Value* kc = c(k, v);
    return mul(v, kc);
  }
  Value* bcast(Value* v, const Value* like) { return bcast(v, like->type.shape); }
  Value* bcast(Value* v, const Shape& s) { return v->type.shape == s ? v : b_.broadcast(v, s); }
  static int last(const Value* v) { return v->type.rank() - 1; }
  static int axisOf(const Op& op, const Value* x) {
    return normalizeAxis(op.attrInt("axis"), x->type.rank(), op.info().name.data());
  }
  Value* rowMean(Value* v) { return b_.reduce(OpKind::Mean, v, {last(v)}, true); }

  // rsqrt(v + eps)
  Value* invStd(Value* v, double eps) {
    Value* e = c(eps, v);
    return un(OpKind::Rsqrt, add(v, e));
  }

  // x - stop_gradient(max over `axis`), the max kept as a size-1 axis in *rowMax.
  Value* minusRowMax(Value* x, int axis, Value** rowMax = nullptr) {
    Value* m = un(OpKind::StopGradient, b_.reduce(OpKind::RMax, x, {axis}, true));
    if (rowMax) *rowMax = m;
    return sub(x, bcast(m, x));
  }

  Value* softmax(Value* x, int axis) {
    Value* e = un(OpKind::Exp, minusRowMax(x, axis));
    Value* s = bcast(b_.reduce(OpKind::Sum, e, {axis}, true), x);
    return div(e, s);
  }

  Value* logSoftmax(Value* x, int axis) {
    Value* z = minusRowMax(x, axis);
    Value* e = un(OpKind::Exp, z);
    Value* lse = bcast(un(OpKind::Log, b_.reduce(OpKind::Sum, e, {axis}, true)), x);
    return sub(z, lse);
  }

  // torch's formulas, in its operation order: x/2 (1 + erf(x / sqrt 2)), or
  // x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  Value* gelu(Value* x, const std::string& approximate) {
    Value* half = c(0.5, x);
    Value* one = c(1, x);
    if (approximate == "tanh") {
      Value* x2 = mul(x, x);
      Value* x3 = mul(x2, x);
      Value* k = c(0.044715, x);
      Value* inner = add(x, mul(k, x3));
      Value* alpha = c(std::sqrt(2 / std::numbers::pi), x);
      Value* t = un(OpKind::Tanh, mul(alpha, inner));
      Value* hx = mul(half, x);
      return mul(hx, add(one, t));
    }
    Value* e = un(OpKind::Erf, mulC(x, 1 / std::sqrt(2.0)));
    Value* hx = mul(x, half);
    return mul(hx, add(one, e));
  }

  // The interpreter's arithmetic step for step (so they agree to an ulp): inv_freq[i] =
  // theta^(-(2i) / d) and angle = pos * inv_freq in f32; pairs (x[2i], x[2i+1]) seen as
  // [..., T, d/2, 2] and rotated; both halves concatenated back along the pair axis.
  Value* rope(Value* x, Value* pos, double theta) {
    const Shape& xs = x->type.shape;
    const int r = x->type.rank();
    const int64_t T = xs[size_t(r - 2)], d = xs[size_t(r - 1)], h = d / 2;
    const Type fh{DType::f32, {h}};
    Value* i = b_.iota(0, fh);
    Value* minus2i = mulC(i, -2);
    Value* expo = div(minus2i, b_.constant(double(d), fh));
    Value* base = b_.constant(theta, fh);
    Value* invFreq = b_.binary(OpKind::Pow, base, expo);
    Value* p = bcast(b_.reshape(b_.cast(pos, DType::f32), {T, 1}), Shape{T, h});
    Value* angle = mul(p, bcast(invFreq, Shape{T, h}));
    Shape pairs = xs;
    pairs.back() = h;
    pairs.push_back(2);
    Shape half = pairs;
    half.back() = 1;
    auto trig = [&](OpKind k) {
      Value* v = b_.reshape(un(k, angle), {T, h, 1});
      if (x->type.dtype != DType::f32) v = b_.cast(v, x->type.dtype);
      return bcast(v, half);
    };
    Value* cs = trig(OpKind::Cos);
    Value* sn = trig(OpKind::Sin);
    Value* xp = b_.reshape(x, pairs);
    Value* x0 = b_.slice(xp, r, 0, 1);
    Value* x1 = b_.slice(xp, r, 1, 2);
    Value* x0c = mul(x0, cs);
    Value* x1s = mul(x1, sn);
    Value* even = sub(x0c, x1s);
    Value* x0s = mul(x0, sn);
    Value* x1c = mul(x1, cs);
    Value* odd = add(x0s, x1c);
    return b_.reshape(b_.concat({even, odd}, r), xs);
  }

  // mean over rows of m + log(sum(exp(x - m))) - x[target], with the target logit picked
  // by select(iota == target, x, 0) summed over the row.
  Value* crossEntropy(Value* logits, Value* targets) {
    const Shape& s = logits->type.shape;
    const int ax = last(logits);
    Shape keep = s;
    keep.back() = 1;
    Value* m = nullptr;
    Value* z = minusRowMax(logits, ax, &m);
    Value* e = un(OpKind::Exp, z);
    Value* lse = un(OpKind::Log, b_.reduce(OpKind::Sum, e, {ax}, false));
    Value* cls = b_.iota(ax, Type{targets->type.dtype, s});
    Value* tgt = bcast(b_.reshape(targets, keep), s);
    Value* hot = b_.binary(OpKind::Eq, cls, tgt);
    Value* zero = c(0, logits);
    Value* picked = b_.reduce(OpKind::Sum, b_.select(hot, logits, zero), {ax}, false);
    Value* mr = b_.reshape(m, targets->type.shape);
    Value* perRow = sub(add(mr, lse), picked);
    if (perRow->type.rank() == 0) return perRow;  // one row
    std::vector<int64_t> all;
    for (int64_t a = 0; a < perRow->type.rank(); ++a) all.push_back(a);
    return b_.reduce(OpKind::Mean, perRow, all, false);
  }

  // Grouped-query attention's k or v ([..., Hkv, T, d]) with each head repeated for the
  // group of query heads that reads it ([..., Hkv * group, T, d], head h = kv head h / group),
  // as PyTorch's repeat_kv does; `like` is q. Unchanged without a group.
  Value* repeatHeads(Value* kv, const Value* like) {
    const int64_t group = attentionGroup(like->type, kv->type);
    if (group == 1) return kv;
    const int r = kv->type.rank();
    Shape split = kv->type.shape;
    split.insert(split.begin() + (r - 2), 1);
    Value* one = b_.reshape(kv, split);
    split[size_t(r - 2)] = group;
    Shape merged = kv->type.shape;
    merged[size_t(r - 3)] *= group;
    return b_.reshape(b_.broadcast(one, split), merged);
  }
  // The gradient of repeatHeads: each kv head's gradient is the sum over its group.
  Value* sumGroups(Value* grad, const Value* kv) {
    const int64_t group = attentionGroup(grad->type, kv->type);
    if (group == 1) return grad;
    const int r = kv->type.rank();
    Shape split = kv->type.shape;
    split.insert(split.begin() + (r - 2), group);
    return b_.reduce(OpKind::Sum, b_.reshape(grad, split), {int64_t(r - 2)}, false);
  }

  // S = q k^T scale; causal: query i sees keys j <= i + (Tk - Tq), others are -inf.
  Value* maskedScores(Value* q, Value* k, bool causal, double scale) {
    Value* S = mulC(b_.matmul(q, k, false, true), scale);
    if (!causal) return S;
    const int R = q->type.rank();
    const int64_t Tq = q->type.shape[size_t(R - 2)], Tk = k->type.shape[size_t(R - 2)];
    const Type it{DType::i64, {Tq, Tk}};
    Value* i = b_.iota(0, it);
    Value* j = b_.iota(1, it);
    Value* shift = b_.constant(double(Tk - Tq), it);
    Value* visible = bcast(b_.binary(OpKind::Le, j, add(i, shift)), S);
    Value* masked = c(-std::numeric_limits<double>::infinity(), S);
    return b_.select(visible, S, masked);
  }

  // o = softmax over the keys, times v; lse = m + log(sum exp(S - m)) in f32 (its type).
  // lse only where something reads it (attention_backward, before its own expansion).
  std::vector<Value*> attention(Value* q, Value* k, Value* v, bool causal, double scale, bool wantLse) {
    k = repeatHeads(k, q);
    v = repeatHeads(v, q);
    Value* S = maskedScores(q, k, causal, scale);
    Value* P = softmaxComposite_ ? b_.create1(OpKind::Softmax, {S}, {{"axis", int64_t(-1)}}) : softmax(S, last(S));
    Value* o = b_.matmul(P, v);
    if (!wantLse) return {o, nullptr};
    Value* S32 = S->type.dtype == DType::f32 ? S : b_.cast(S, DType::f32);
    Value* m = nullptr;
    Value* e = un(OpKind::Exp, minusRowMax(S32, last(S32), &m));
    Value* logSum = un(OpKind::Log, b_.reduce(OpKind::Sum, e, {last(e)}, true));
    Value* lse = add(m, logSum);
    Shape rows = lse->type.shape;
    rows.pop_back();
    return {o, b_.reshape(lse, rows)};
  }

  // The formula of the op (ops.def): P = exp(S - lse) (masked scores are -inf, so 0),
  // D = rowsum(do o) in f32, dv = P^T do, dS = P (do v^T - D) scale, dq = dS k, dk = dS^T q.
  // The [.., Tq, Tk] intermediates keep the operands' dtype, as the naive lowering's do.
  std::vector<Value*> attentionBackward(const Op& op) {
    Value *q = op.operands[0], *k = repeatHeads(op.operands[1], op.operands[0]), *v = repeatHeads(op.operands[2], op.operands[0]),
          *o = op.operands[3], *dO = op.operands[4], *lse = op.operands[5];
    const DType dt = q->type.dtype;
    Value* S = maskedScores(q, k, op.attrBool("causal"), op.attrFloat("scale"));
    Shape keep = lse->type.shape;
    keep.push_back(1);
    Value* L = bcast(b_.reshape(lse, keep), S->type.shape);
    Value* S32 = dt == DType::f32 ? S : b_.cast(S, DType::f32);
    Value* P = un(OpKind::Exp, sub(S32, L));
    if (dt != DType::f32) P = b_.cast(P, dt);
    Value* o32 = dt == DType::f32 ? o : b_.cast(o, DType::f32);
    Value* dO32 = dt == DType::f32 ? dO : b_.cast(dO, DType::f32);
    Value* D = b_.reduce(OpKind::Sum, mul(dO32, o32), {last(o32)}, true);
    Value* dv = b_.matmul(P, dO, true, false);
    Value* dP = b_.matmul(dO, v, false, true);
    Value* dP32 = dt == DType::f32 ? dP : b_.cast(dP, DType::f32);
    Value* P32 = dt == DType::f32 ? P : b_.cast(P, DType::f32);
    Value* dS = mulC(mul(P32, sub(dP32, bcast(D, dP32))), op.attrFloat("scale"));
    if (dt != DType::f32) dS = b_.cast(dS, dt);
    Value* dq = b_.matmul(dS, k);
    Value* dk = b_.matmul(dS, q, true, false);
    return {dq, sumGroups(dk, op.operands[1]), sumGroups(dv, op.operands[2])};
  }

  Builder& b_;
  bool softmaxComposite_;
};

}  // namespace

namespace {

// Expands the composites `wanted` accepts (in kernel bodies too).
bool expandComposites(Graph& g, bool (*wanted)(OpKind), bool softmaxComposite) {
  bool changed = false;
  std::vector<std::unique_ptr<Op>> old = std::move(g.ops);
  g.ops.clear();
  PtrMap<const Value*, Value*> repl;  // composite result -> its expansion
  // Replaced ops stay allocated so that no new Value reuses a key's address.
  std::vector<std::unique_ptr<Op>> graveyard;
  Builder b(g);
  Expander ex(b, softmaxComposite);
  PtrSet<const Value*> read(g.outputs.begin(), g.outputs.end());
  for (auto& op : old)
    for (Value* v : op->operands) read.insert(v);
  for (auto& op : old) {
    for (Value*& v : op->operands)
      if (auto it = repl.find(v); it != repl.end()) v = it->second;
    if (op->body) changed |= expandComposites(*op->body, wanted, softmaxComposite);
    if (op->info().category != OpCategory::Composite || !wanted(op->kind)) {
      g.ops.push_back(std::move(op));
      continue;
    }
    const size_t first = g.ops.size();
    std::vector<bool> used;
    for (auto& r : op->results) used.push_back(read.count(r.get()) != 0);
    std::vector<Value*> rs = ex.expandAll(*op, used);
    for (size_t k = first; k < g.ops.size(); ++k) g.ops[k]->loc = op->loc;
    for (size_t r = 0; r < rs.size(); ++r) {
      if (!rs[r]) continue;  // unread
      rs[r]->name = op->result(int(r))->name;
      repl[op->result(int(r))] = rs[r];
    }
    graveyard.push_back(std::move(op));
    changed = true;
  }
  for (Value*& v : g.outputs)
    if (auto it = repl.find(v); it != repl.end()) v = it->second;
  return changed;
}

bool anyComposite(OpKind) { return true; }
bool isAttention(OpKind k) { return k == OpKind::Attention || k == OpKind::AttentionBackward; }
bool attentionOnly(OpKind k) { return isAttention(k); }
bool allButAttention(OpKind k) { return !isAttention(k); }

}  // namespace

bool decomposeGraph(Graph& g) { return expandComposites(g, &anyComposite, false); }
bool decomposeAttention(Graph& g) { return expandComposites(g, &attentionOnly, true); }
bool decomposeKeepingAttention(Graph& g) { return expandComposites(g, &allButAttention, false); }

std::unique_ptr<Pass> createDecomposePass() { return std::make_unique<FunctionPass>("decompose", &decomposeGraph); }
std::unique_ptr<Pass> createDecomposeKeepAttentionPass() {
  return std::make_unique<FunctionPass>("decompose-keep-attention", &decomposeKeepingAttention);
}
std::unique_ptr<Pass> createDecomposeAttentionPass() {
  return std::make_unique<FunctionPass>("decompose-attention", &decomposeAttention);
}

}  // namespace fusec
