#include "frontend/tensor.h"

#include <cmath>
#include <limits>

#include "ir/type_rules.h"

namespace fusec::fe {

namespace {

Builder* commonBuilder(const Tensor& a, const Tensor& b, const char* what) {
  if (!a.defined() || !b.defined()) throw Error(std::string(what) + " got an undefined tensor");
  if (&a.builder() != &b.builder()) throw Error(std::string(what) + " mixes tensors of different graphs");
  return &a.builder();
}

// Both operands stretched to their common shape.
std::pair<Tensor, Tensor> broadcastPair(const Tensor& a, const Tensor& b, const char* what) {
  commonBuilder(a, b, what);
  if (a.shape() == b.shape()) return {a, b};
  Shape s = broadcastShapes(a.shape(), b.shape());
  return {a.broadcastTo(s), b.broadcastTo(s)};
}

Tensor binary(OpKind k, const Tensor& a, const Tensor& b) {
  auto [x, y] = broadcastPair(a, b, opInfo(k).name.data());
  return Tensor(&x.builder(), x.builder().binary(k, x.value(), y.value()));
}

Tensor splatLike(const Tensor& t, double v) { return full(t.builder(), t.shape(), v, t.dtype()); }

}  // namespace

Tensor::Tensor(Builder* b, Value* v) : b_(b), v_(v) {
  if (!b || !v) throw Error("internal: tensor handle without a builder or value");
}

Builder& Tensor::builder() const {
  if (!b_) throw Error("internal: use of an undefined tensor");
  return *b_;
}

int64_t Tensor::size(int64_t dim) const { return shape()[size_t(normalizeAxis(dim, rank(), "size"))]; }

const Tensor& Tensor::named(const std::string& name) const {
  v_->name = name;
  return *this;
}

Shape broadcastShapes(const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    // Aligned on the right: position i of the result is a[i - (r - a.size())].
    int64_t x = i + a.size() >= r ? a[i + a.size() - r] : 1;
    int64_t y = i + b.size() >= r ? b[i + b.size() - r] : 1;
    if (x != y && x != 1 && y != 1) throw Error("cannot broadcast " + shapeStr(a) + " with " + shapeStr(b));
    out[i] = x == 1 ? y : x;
  }
  return out;
}

// ---- pointwise
#define FE_UNARY(method, kind) \
  Tensor Tensor::method() const { return Tensor(b_, builder().unary(OpKind::kind, v_)); }
FE_UNARY(neg, Neg)
FE_UNARY(abs, Abs)
FE_UNARY(relu, Relu)
FE_UNARY(exp, Exp)
FE_UNARY(log, Log)
FE_UNARY(sqrt, Sqrt)
FE_UNARY(rsqrt, Rsqrt)
FE_UNARY(recip, Recip)
FE_UNARY(tanh, Tanh)
FE_UNARY(sin, Sin)
FE_UNARY(cos, Cos)
FE_UNARY(sigmoid, Sigmoid)
FE_UNARY(silu, Silu)
FE_UNARY(erf, Erf)
FE_UNARY(stopGradient, StopGradient)
#undef FE_UNARY

Tensor Tensor::square() const { return *this * *this; }
Tensor Tensor::pow(const Tensor& e) const { return binary(OpKind::Pow, *this, e); }
Tensor Tensor::pow(double e) const { return binary(OpKind::Pow, *this, splatLike(*this, e)); }
Tensor Tensor::cast(DType d) const { return d == dtype() ? *this : Tensor(b_, builder().cast(v_, d)); }

// ---- reductions
Tensor Tensor::sum(std::vector<int64_t> dims, bool keepdim) const {
  return Tensor(b_, builder().reduce(OpKind::Sum, v_, std::move(dims), keepdim));
}
Tensor Tensor::mean(std::vector<int64_t> dims, bool keepdim) const {
  return Tensor(b_, builder().reduce(OpKind::Mean, v_, std::move(dims), keepdim));
}
Tensor Tensor::max(std::vector<int64_t> dims, bool keepdim) const {
  return Tensor(b_, builder().reduce(OpKind::RMax, v_, std::move(dims), keepdim));
}
Tensor Tensor::min(std::vector<int64_t> dims, bool keepdim) const {
  return Tensor(b_, builder().reduce(OpKind::RMin, v_, std::move(dims), keepdim));
}

// ---- composites
Tensor Tensor::softmax(int64_t dim) const { return Tensor(b_, builder().create1(OpKind::Softmax, {v_}, {{"axis", dim}})); }
Tensor Tensor::logSoftmax(int64_t dim) const {
  return Tensor(b_, builder().create1(OpKind::LogSoftmax, {v_}, {{"axis", dim}}));
}
Tensor Tensor::rmsnorm(const Tensor& weight, double eps) const {
  commonBuilder(*this, weight, "rmsnorm");
  return Tensor(b_, builder().create1(OpKind::RMSNorm, {v_, weight.value()}, {{"eps", eps}}));
}
Tensor Tensor::gelu(const std::string& approximate) const {
  return Tensor(b_, builder().create1(OpKind::Gelu, {v_}, {{"approximate", approximate}}));
}
Tensor Tensor::layerNorm(const Tensor& weight, const Tensor& bias, double eps) const {
  commonBuilder(*this, weight, "layernorm");
  commonBuilder(*this, bias, "layernorm");
  return Tensor(b_, builder().create1(OpKind::LayerNorm, {v_, weight.value(), bias.value()}, {{"eps", eps}}));
}
Tensor Tensor::rope(const Tensor& positions, double theta) const {
  commonBuilder(*this, positions, "rope");
  return Tensor(b_, builder().create1(OpKind::Rope, {v_, positions.value()}, {{"theta", theta}}));
}

// ---- layout
Tensor Tensor::reshape(Shape s) const {
  int inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (inferred >= 0) throw Error("reshape to " + shapeStr(s) + ": only one dimension can be -1");
      inferred = int(i);
    } else {
      known *= s[i];
    }
  }
  if (inferred >= 0) {
    if (known == 0 || numel() % known != 0)
      throw Error("reshape of " + type().str() + " to " + shapeStr(s) + ": cannot infer the -1 dimension");
    s[size_t(inferred)] = numel() / known;
  }
  if (s == shape()) return *this;
  return Tensor(b_, builder().reshape(v_, std::move(s)));
}

Tensor Tensor::permute(std::vector<int64_t> perm) const {
  for (auto& p : perm)
    if (p < 0) p += rank();
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == int64_t(i);
  if (identity && int(perm.size()) == rank()) return *this;
  return Tensor(b_, builder().permute(v_, std::move(perm)));
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  int a = normalizeAxis(d0, rank(), "transpose"), c = normalizeAxis(d1, rank(), "transpose");
  std::vector<int64_t> perm(static_cast<size_t>(rank()));
  for (int i = 0; i < rank(); ++i) perm[size_t(i)] = i;
  std::swap(perm[size_t(a)], perm[size_t(c)]);
  return permute(std::move(perm));
}

Tensor Tensor::broadcastTo(const Shape& s) const {
  if (s == shape()) return *this;
  return Tensor(b_, builder().broadcast(v_, s));
}

Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  return Tensor(b_, builder().slice(v_, dim, start, end, step));
}

Tensor Tensor::unsqueeze(int64_t dim) const {
  int d = normalizeAxis(dim, rank() + 1, "unsqueeze");
  Shape s = shape();
  s.insert(s.begin() + d, 1);
  return reshape(std::move(s));
}

Tensor Tensor::maskedFill(const Tensor& mask, double value) const {
  return where(mask, splatLike(*this, value), *this);
}

Tensor Tensor::matmul(const Tensor& b, bool ta, bool tb) const {
  commonBuilder(*this, b, "matmul");
  return Tensor(b_, builder().matmul(v_, b.value(), ta, tb));
}

// ---- sources
Tensor input(Builder& b, const std::string& name, const Type& t, Role role) {
  Value* v = b.input(name, t);
  setRole(*v->def, role);
  return Tensor(&b, v);
}
Tensor param(Builder& b, const std::string& name, const Type& t, int64_t layer) {
  Value* v = b.param(name, t);
  setLayer(*v->def, layer);
  return Tensor(&b, v);
}
Tensor full(Builder& b, const Shape& shape, double value, DType dtype) {
  return Tensor(&b, b.constant(value, Type{dtype, shape}));
}
Tensor scalar(Builder& b, double value, DType dtype) { return full(b, {}, value, dtype); }
Tensor arange(Builder& b, int64_t n, DType dtype) { return Tensor(&b, b.iota(0, Type{dtype, {n}})); }

// ---- operators
Tensor operator+(const Tensor& a, const Tensor& b) { return binary(OpKind::Add, a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return binary(OpKind::Sub, a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return binary(OpKind::Mul, a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return binary(OpKind::Div, a, b); }
Tensor operator+(const Tensor& a, double b) { return a + splatLike(a, b); }
Tensor operator-(const Tensor& a, double b) { return a - splatLike(a, b); }
Tensor operator*(const Tensor& a, double b) { return a * splatLike(a, b); }
Tensor operator/(const Tensor& a, double b) { return a / splatLike(a, b); }
Tensor operator+(double a, const Tensor& b) { return splatLike(b, a) + b; }
Tensor operator-(double a, const Tensor& b) { return splatLike(b, a) - b; }
Tensor operator*(double a, const Tensor& b) { return splatLike(b, a) * b; }
Tensor operator/(double a, const Tensor& b) { return splatLike(b, a) / b; }
Tensor operator-(const Tensor& a) { return a.neg(); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(OpKind::Max, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(OpKind::Min, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary(OpKind::Pow, a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return binary(OpKind::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary(OpKind::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary(OpKind::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary(OpKind::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary(OpKind::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary(OpKind::Ge, a, b); }
Tensor logicalAnd(const Tensor& a, const Tensor& b) { return binary(OpKind::And, a, b); }
Tensor logicalOr(const Tensor& a, const Tensor& b) { return binary(OpKind::Or, a, b); }
Tensor logicalNot(const Tensor& a) { return Tensor(&a.builder(), a.builder().unary(OpKind::Not, a.value())); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  commonBuilder(cond, a, "where");
  commonBuilder(a, b, "where");
  Shape s = broadcastShapes(broadcastShapes(cond.shape(), a.shape()), b.shape());
  Builder& bl = cond.builder();
  return Tensor(&bl, bl.select(cond.broadcastTo(s).value(), a.broadcastTo(s).value(), b.broadcastTo(s).value()));
}

// ---- neural-network helpers
Tensor linear(const Tensor& x, const Tensor& w) { return x.matmul(w, false, true); }

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  commonBuilder(weight, ids, "embedding");
  if (weight.rank() != 2) throw Error("embedding weight must be [V, d], got " + weight.type().str());
  if (!isInt(ids.dtype())) throw Error("embedding ids must be i64 or i32, got " + ids.type().str());
  const int64_t n = ids.numel(), d = weight.size(1);
  Tensor idx = ids.reshape({n, 1}).broadcastTo({n, d});
  Tensor rows(&weight.builder(), weight.builder().gather(weight.value(), idx.value(), 0));
  Shape out = ids.shape();
  out.push_back(d);
  return rows.reshape(std::move(out));
}

Tensor crossEntropy(const Tensor& logits, const Tensor& targets) {
  commonBuilder(logits, targets, "cross_entropy");
  Builder& b = logits.builder();
  return Tensor(&b, b.create1(OpKind::CrossEntropy, {logits.value(), targets.value()}));
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  commonBuilder(q, k, "attention");
  commonBuilder(q, v, "attention");
  Builder& b = q.builder();
  return Tensor(&b, b.create1(OpKind::Attention, {q.value(), k.value(), v.value()}, {{"causal", causal}, {"scale", scale}}));
}

Tensor causalMask(Builder& b, int64_t T) {
  Tensor row(&b, b.iota(0, Type{DType::i64, {T, T}}));
  Tensor col(&b, b.iota(1, Type{DType::i64, {T, T}}));
  return ge(row, col);
}

Tensor attentionExplicit(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  Tensor scores = q.matmul(k, false, true) * scale;
  if (causal) {
    const int64_t Tq = q.size(-2), Tk = k.size(-2);
    if (Tq != Tk) throw Error("explicit causal attention needs equal query and key lengths");
    scores = scores.maskedFill(logicalNot(causalMask(q.builder(), Tq)), -std::numeric_limits<double>::infinity());
  }
  return scores.softmax(-1).matmul(v);
}

}  // namespace fusec::fe
