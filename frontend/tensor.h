// The tracing API: a Tensor is a handle {Builder*, Value*}; every operation on it records IR
// through the Builder (whose shape inference checks it) and returns a new handle. Model code
// written against it reads like PyTorch:
//
//   Tensor h = x.rmsnorm(g, 1e-5);
//   Tensor y = linear(h, w1).silu() * linear(h, w3);
//
// Binary operators broadcast like numpy (shapes aligned on the right, size-1 dimensions
// stretched): the stretch is an explicit `broadcast` op, since IR pointwise ops need operands
// of one shape. Scalar operands become `constant` splats of the other operand's type. There is
// no implicit dtype promotion: mixing f32 and i64 is an error (use cast()).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ir/builder.h"
#include "ir/roles.h"

namespace fusec::fe {

class Tensor {
 public:
  Tensor() = default;
  Tensor(Builder* b, Value* v);

  Builder& builder() const;
  Value* value() const { return v_; }
  const Type& type() const { return v_->type; }
  const Shape& shape() const { return v_->type.shape; }
  DType dtype() const { return v_->type.dtype; }
  int rank() const { return v_->type.rank(); }
  int64_t numel() const { return v_->type.numel(); }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  bool defined() const { return v_ != nullptr; }

  // Names the value (printed as %name); returns *this for chaining.
  const Tensor& named(const std::string& name) const;

  // ---- pointwise
  Tensor neg() const;
  Tensor abs() const;
  Tensor relu() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor recip() const;
  Tensor tanh() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor sigmoid() const;
  Tensor erf() const;
  Tensor stopGradient() const;  // the identity, but no gradient flows back through it
  Tensor square() const;  // x * x
  Tensor pow(const Tensor& exponent) const;  // broadcasting
  Tensor pow(double exponent) const;
  Tensor cast(DType d) const;  // no op when already `d`

  // ---- reductions over `dims` (negative dims count from the end)
  Tensor sum(std::vector<int64_t> dims, bool keepdim = false) const;
  Tensor mean(std::vector<int64_t> dims, bool keepdim = false) const;
  Tensor max(std::vector<int64_t> dims, bool keepdim = false) const;
  Tensor min(std::vector<int64_t> dims, bool keepdim = false) const;

  // ---- composites (expanded later by the decompose pass)
  Tensor softmax(int64_t dim = -1) const;
  Tensor logSoftmax(int64_t dim = -1) const;
  Tensor silu() const;
  // torch.nn.functional.gelu: approximate "none" (erf form) or "tanh".
  Tensor gelu(const std::string& approximate = "none") const;
  // weight * x / sqrt(mean(x^2, -1) + eps); weight has shape [x.size(-1)].
  Tensor rmsnorm(const Tensor& weight, double eps = 1e-5) const;
  // torch.nn.LayerNorm over the last axis (biased variance); weight and bias are [x.size(-1)].
  Tensor layerNorm(const Tensor& weight, const Tensor& bias, double eps = 1e-5) const;
  // Rotates pairs (x[2i], x[2i+1]) of row t by positions[t] * theta^(-2i/d); x is [..., T, d].
  Tensor rope(const Tensor& positions, double theta = 10000) const;

  // ---- layout
  Tensor reshape(Shape shape) const;  // one dimension may be -1 (inferred)
  Tensor view(Shape shape) const { return reshape(std::move(shape)); }
  Tensor permute(std::vector<int64_t> perm) const;  // negative entries count from the end
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor broadcastTo(const Shape& shape) const;  // no op when the shape already matches
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor unsqueeze(int64_t dim) const;

  // ---- selection: where mask is true take `value` (mask broadcasts to this shape)
  Tensor maskedFill(const Tensor& mask, double value) const;

  // ---- matmul: [..., M, K] x [..., K, N]; batch dims equal, or one side has none
  Tensor matmul(const Tensor& b, bool transposeA = false, bool transposeB = false) const;

 private:
  Builder* b_ = nullptr;
  Value* v_ = nullptr;
};

// numpy broadcasting of two shapes; throws Error("cannot broadcast [..] with [..]").
Shape broadcastShapes(const Shape& a, const Shape& b);

// ---- sources
// `role` and `layer`: what the source is (ir/roles.h), which passes and runners read instead
// of its name.
Tensor input(Builder& b, const std::string& name, const Type& t, Role role = Role::Data);
Tensor param(Builder& b, const std::string& name, const Type& t, int64_t layer = -1);  // role weight
Tensor full(Builder& b, const Shape& shape, double value, DType dtype = DType::f32);
Tensor scalar(Builder& b, double value, DType dtype = DType::f32);  // rank 0
Tensor arange(Builder& b, int64_t n, DType dtype = DType::i64);     // 0 .. n-1

// ---- broadcasting binary operators (scalars take the tensor's dtype)
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& base, const Tensor& exponent);
// Comparisons give bool tensors.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor logicalAnd(const Tensor& a, const Tensor& b);
Tensor logicalOr(const Tensor& a, const Tensor& b);
Tensor logicalNot(const Tensor& a);
// cond ? a : b, all three broadcast to one shape.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// ---- neural-network helpers
// x @ w^T with w in the [out, in] layout of torch.nn.Linear (folded into the GEMM flags).
Tensor linear(const Tensor& x, const Tensor& w);
// weight[ids]: weight [V, d], ids integer [...] -> [..., d]. The IR gather is take-along-axis,
// so this is gather(weight, broadcast(reshape(ids, [n, 1]), [n, d]), axis 0) reshaped back.
Tensor embedding(const Tensor& weight, const Tensor& ids);
// Mean over rows of logsumexp(logits) - logits[target]; logits [..., V], targets [...].
Tensor crossEntropy(const Tensor& logits, const Tensor& targets);
// softmax(q k^T * scale [causally masked]) v as the IR `attention` composite; [..., T, d].
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale);
// The same computation written out: matmul, scale, masked fill with -inf, softmax, matmul.
Tensor attentionExplicit(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale);
// Lower-triangular bool [T, T] mask (true where key j <= query i).
Tensor causalMask(Builder& b, int64_t T);

}  // namespace fusec::fe
