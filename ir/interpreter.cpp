// CPU reference interpreter (see ir/interpreter.h). It is the oracle that every pass and
// every generated kernel is checked against, so each op is evaluated as directly as
// possible and every rounding step is spelled out:
//   * float dtypes are stored as float, already rounded to the dtype; pointwise formulas
//     (taken from ir/ops.def, never restated here) run in f32 and the result is rounded
//     once to the dtype;
//   * reductions, matmul, scatter_add and the accumulating parts of composites accumulate
//     in double and round once at the end, straight from double to the dtype (no detour
//     through f32, which could double-round);
//   * integers are held as int64; arithmetic wraps (done in uint64) and i32 results wrap
//     to 32 bits; every would-be UB (division by zero, float->int overflow) throws Error.
#include "ir/interpreter.h"

#include "ir/cpu_blas.h"
#include "ir/strided_view.h"

#include <algorithm>
#include <bit>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <type_traits>
#include <unordered_map>

#include "ir/philox.h"
#include "ir/printer.h"
#include "ir/type_rules.h"

namespace fusec {
namespace {

int64_t wrap32(int64_t v) { return int64_t(int32_t(uint32_t(uint64_t(v)))); }  // modular (C++20)

// Stores an int64 computation result into an integer or bool dtype.
int64_t storeInt(int64_t v, DType d) {
  switch (d) {
    case DType::i32: return wrap32(v);
    case DType::boolean: return v != 0;
    default: return v;
  }
}

// ---------------------------------------------------------------------------------------
// Pointwise formulas from ops.def

// Integer scalar used to evaluate the ops.def formulas for i64/i32/bool: the same
// expression text, but +,-,* wrap (computed in uint64) and / throws on zero instead of UB.
struct I64 {
  int64_t v = 0;
  constexpr I64() = default;
  constexpr I64(int64_t x) : v(x) {}  // NOLINT: implicit so that literals like 0 mix in
  explicit constexpr operator bool() const { return v != 0; }
};
I64 operator-(I64 a) { return I64(int64_t(0 - uint64_t(a.v))); }
I64 operator+(I64 a, I64 b) { return I64(int64_t(uint64_t(a.v) + uint64_t(b.v))); }
I64 operator-(I64 a, I64 b) { return I64(int64_t(uint64_t(a.v) - uint64_t(b.v))); }
I64 operator*(I64 a, I64 b) { return I64(int64_t(uint64_t(a.v) * uint64_t(b.v))); }
I64 operator/(I64 a, I64 b) {
  if (b.v == 0) throw Error("integer division by zero");
  if (b.v == -1) return -a;  // INT64_MIN / -1 wraps instead of trapping
  return I64(a.v / b.v);     // C++: truncates toward zero
}
bool operator==(I64 a, I64 b) { return a.v == b.v; }
bool operator!=(I64 a, I64 b) { return a.v != b.v; }
bool operator<(I64 a, I64 b) { return a.v < b.v; }
bool operator<=(I64 a, I64 b) { return a.v <= b.v; }
bool operator>(I64 a, I64 b) { return a.v > b.v; }
bool operator>=(I64 a, I64 b) { return a.v >= b.v; }

// uniform's formula (ops.def) over the integer scalars; pointwise() evaluates uniform itself
// (integer operands, a float result), this only lets the generated loops compile.
float fusec_uniform(I64 a, I64 b, I64 c) { return fusec::fusec_uniform(a.v, b.v, c.v); }

inline float unwrap(float x) { return x; }
inline int64_t unwrap(I64 x) { return x.v; }

// Float-only rules: their formulas (exp, pow, ...) are not instantiated for I64.
constexpr bool takesInts(TypeRule r) { return r != TypeRule::UnaryFloat && r != TypeRule::BinaryFloat; }

// out[e] = Expr(A[e], B[e], C[e]) computed in T (float or I64) over storage S (float or
// int64). One loop per op, generated from ops.def, so the per-element cost is the formula.
template <class T, class S>
void pointwiseLoop(OpKind kind, size_t n, const S* A, const S* B, const S* C, S* out) {
  using std::cos, std::erf, std::exp, std::log, std::pow, std::sin, std::sqrt, std::tanh;
  switch (kind) {
#define FIR_POINTWISE(Id, Text, Rule, Arity, Expr)                        \
  case OpKind::Id:                                                        \
    if constexpr (std::is_same_v<T, float> || takesInts(TypeRule::Rule)) { \
      for (size_t e = 0; e < n; ++e) {                                    \
        const T a = T(A[e]);                                              \
        const T b = (Arity) > 1 ? T(B[e]) : T(0);                         \
        const T c = (Arity) > 2 ? T(C[e]) : T(0);                         \
        (void)b;                                                          \
        (void)c;                                                          \
        out[e] = unwrap(T(Expr));                                         \
      }                                                                   \
      return;                                                             \
    }                                                                     \
    break;
#include "ir/ops.def"
#include "support/ptr_hash.h"
    default: break;
  }
  throw Error("internal: no " + std::string(std::is_same_v<T, float> ? "float" : "integer") +
              " evaluation for '" + std::string(opInfo(kind).name) + "'");
}

// ---------------------------------------------------------------------------------------
// Index helpers

std::vector<int64_t> stridesOf(const Shape& s) { return contiguousStrides(s); }

int64_t numelOf(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Visits the elements of `shape` in row-major order, calling fn(k, off) with the flat
// index k and off = base + sum_d idx[d] * stride[d]. With suitable strides this one
// odometer does permute (permuted strides), broadcast (stride 0), slice (scaled stride and
// base), and reduction/gather addressing (stride 0 on the collapsed axis).
template <class F>
void forEachStrided(const Shape& shape, const std::vector<int64_t>& stride, int64_t base, F&& fn) {
  const int r = int(shape.size());
  if (numelOf(shape) == 0) return;
  if (r == 0) {
    fn(size_t(0), base);
    return;
  }
  std::vector<int64_t> idx(size_t(r), 0);
  const int64_t inner = shape[size_t(r - 1)], innerStride = stride[size_t(r - 1)];
  int64_t off = base;
  size_t k = 0;
  for (;;) {
    for (int64_t j = 0; j < inner; ++j) fn(k++, off + j * innerStride);
    int d = r - 2;
    for (; d >= 0; --d) {
      if (++idx[size_t(d)] < shape[size_t(d)]) {
        off += stride[size_t(d)];
        break;
      }
      off -= (shape[size_t(d)] - 1) * stride[size_t(d)];
      idx[size_t(d)] = 0;
    }
    if (d < 0) return;
  }
}

// Calls f(src, dst) with the storage vectors (float or int64) that `dtype` uses, so layout
// ops are written once for all dtypes.
template <class F>
void onStorage(DType dtype, const HostTensor& src, HostTensor& dst, F&& f) {
  if (isFloat(dtype)) f(src.f, dst.f);
  else f(src.i, dst.i);
}

// A tensor viewed as [outer, len, inner] around one axis.
struct AxisSplit {
  int64_t outer = 1, len = 1, inner = 1;
};
AxisSplit splitAt(const Shape& s, int axis) {
  AxisSplit r;
  for (int d = 0; d < int(s.size()); ++d) {
    if (d < axis) r.outer *= s[size_t(d)];
    else if (d == axis) r.len = s[size_t(d)];
    else r.inner *= s[size_t(d)];
  }
  return r;
}

[[noreturn]] void internal(const Op& op, const std::string& what) {
  throw Error("internal: " + std::string(op.info().name) + ": " + what + " (the IR was not verified?)");
}

// ---------------------------------------------------------------------------------------
// Sources

HostTensor constantTensor(const Op& op) {
  const Type& t = op.result()->type;
  HostTensor out = HostTensor::zeros(t);
  double v = op.attrFloat("value");
  if (isFloat(t.dtype)) {
    std::fill(out.f.begin(), out.f.end(), roundDouble(v, t.dtype));
  } else if (t.dtype == DType::boolean) {
    std::fill(out.i.begin(), out.i.end(), int64_t(v != 0));
  } else {
    if (!std::isfinite(v) || v != std::trunc(v))
      throw Error("constant " + formatFloat(v) + " is not representable in " + std::string(dtypeName(t.dtype)));
    std::fill(out.i.begin(), out.i.end(), floatToInt(v, t.dtype));
  }
  return out;
}

HostTensor iotaTensor(const Op& op) {
  const Type& t = op.result()->type;
  HostTensor out = HostTensor::zeros(t);
  int axis = normalizeAxis(op.attrInt("axis"), t.rank(), "iota");
  int64_t stride = stridesOf(t.shape)[size_t(axis)], dim = t.shape[size_t(axis)];
  for (size_t k = 0; k < out.size(); ++k) {
    int64_t v = (int64_t(k) / stride) % dim;
    if (isFloat(t.dtype)) out.f[k] = intToFloat(v, t.dtype);
    else out.i[k] = storeInt(v, t.dtype);
  }
  return out;
}

// Copies a caller-supplied binding after checking it against the declared type. Float
// values are rounded to the dtype (a no-op for well-formed bindings) so that the storage
// invariant holds; integer values outside their dtype are rejected rather than guessed at.
HostTensor checkBinding(const std::string& what, const Type& want, const HostTensor& got) {
  if (got.type != want)
    throw Error("value for " + what + " has type " + got.type.str() + ", expected " + want.str());
  size_t n = size_t(want.numel());
  size_t have = isFloat(want.dtype) ? got.f.size() : got.i.size();
  if (have != n)
    throw Error("value for " + what + " holds " + std::to_string(have) + " elements, its type " + want.str() +
                " needs " + std::to_string(n));
  HostTensor t = got;
  if (isFloat(want.dtype)) {
    if (want.dtype != DType::f32)
      for (float& v : t.f) v = roundToDType(v, want.dtype);
  } else {
    for (int64_t v : t.i)
      if (storeInt(v, want.dtype) != v)
        throw Error("value for " + what + " holds " + std::to_string(v) + ", which is not a " +
                    std::string(dtypeName(want.dtype)));
  }
  return t;
}

// ---------------------------------------------------------------------------------------
// Pointwise

HostTensor castTensor(const HostTensor& x, const Type& rt) {
  HostTensor out = HostTensor::zeros(rt);
  DType from = x.type.dtype, to = rt.dtype;
  for (size_t k = 0; k < out.size(); ++k) {
    if (isFloat(from)) {
      if (isFloat(to)) out.f[k] = roundToDType(x.f[k], to);
      else out.i[k] = floatToInt(x.f[k], to);
    } else {
      if (isFloat(to)) out.f[k] = intToFloat(x.i[k], to);
      else out.i[k] = storeInt(x.i[k], to);  // i64->i32 wraps; ->bool is x != 0
    }
  }
  return out;
}

// dropout(x, key): element k kept (and scaled by 1/(1-p)) where uniform(k, key, stream) >= p,
// as decompose writes it (the scale rounded to x's dtype first, then the product).
HostTensor dropout(const Op& op, const HostTensor& x, const HostTensor& key) {
  HostTensor out = HostTensor::zeros(x.type);
  const float p = roundDouble(op.attrFloat("p"), DType::f32);
  const float scale = roundDouble(1.0 / (1.0 - op.attrFloat("p")), x.type.dtype);
  const int64_t stream = op.attrInt("stream");
  for (size_t k = 0; k < out.size(); ++k)
    out.f[k] = fusec::fusec_uniform(int64_t(k), key.i.at(0), stream) >= p ? roundToDType(x.f[k] * scale, x.type.dtype)
                                                                           : 0.0f;
  return out;
}

HostTensor pointwise(const Op& op, const std::vector<const HostTensor*>& in) {
  const Type& rt = op.result()->type;
  if (op.kind == OpKind::Cast) return castTensor(*in[0], rt);
  HostTensor out = HostTensor::zeros(rt);
  const size_t n = out.size();
  if (op.kind == OpKind::Uniform) {
    for (size_t k = 0; k < n; ++k) out.f[k] = fusec::fusec_uniform(in[0]->i[k], in[1]->i[k], in[2]->i[k]);
    return out;
  }
  // The formula runs in the dtype of the data operands: operand 0, or the branches of
  // select (its condition is bool). Compare ops then turn the result into bool.
  const DType domain = in[op.kind == OpKind::Select ? 1 : 0]->type.dtype;
  if (isFloat(domain)) {
    std::vector<float> converted[3];  // select's bool condition, as 0/1 floats
    const float* p[3] = {nullptr, nullptr, nullptr};
    for (size_t j = 0; j < in.size() && j < 3; ++j) {
      if (isFloat(in[j]->type.dtype)) {
        p[j] = in[j]->f.data();
      } else {
        converted[j].assign(in[j]->i.size(), 0.0f);
        for (size_t k = 0; k < n; ++k) converted[j][k] = in[j]->i[k] != 0 ? 1.0f : 0.0f;
        p[j] = converted[j].data();
      }
    }
    if (isFloat(rt.dtype)) {
      pointwiseLoop<float>(op.kind, n, p[0], p[1], p[2], out.f.data());
      if (rt.dtype != DType::f32)
        for (float& v : out.f) v = roundToDType(v, rt.dtype);
    } else {
      std::vector<float> tmp(n);
      pointwiseLoop<float>(op.kind, n, p[0], p[1], p[2], tmp.data());
      for (size_t k = 0; k < n; ++k) out.i[k] = storeInt(tmp[k] != 0, rt.dtype);
    }
  } else {
    const int64_t* p[3] = {nullptr, nullptr, nullptr};
    for (size_t j = 0; j < in.size() && j < 3; ++j) p[j] = in[j]->i.data();
    pointwiseLoop<I64>(op.kind, n, p[0], p[1], p[2], out.i.data());
    for (int64_t& v : out.i) v = storeInt(v, rt.dtype);
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Reductions

HostTensor reduction(const Op& op, const HostTensor& x) {
  const Type& rt = op.result()->type;
  HostTensor out = HostTensor::zeros(rt);
  const int r = x.type.rank();
  std::vector<bool> reduced(size_t(r), false);
  for (int64_t a : op.attrInts("axes")) reduced[size_t(normalizeAxis(a, r, op.info().name.data()))] = true;
  // Output offset of each input element: the kept dims in order (keepdim's 1-sized dims do
  // not change flat indices), stride 0 along reduced dims.
  std::vector<int64_t> ostride(size_t(r), 0);
  int64_t kept = 1, count = 1;
  for (int d = r - 1; d >= 0; --d) {
    if (reduced[size_t(d)]) {
      count *= x.type.shape[size_t(d)];
    } else {
      ostride[size_t(d)] = kept;
      kept *= x.type.shape[size_t(d)];
    }
  }
  if (size_t(kept) != out.size()) internal(op, "result type " + rt.str() + " does not match the reduction");
  const bool isMax = op.kind == OpKind::RMax, isMin = op.kind == OpKind::RMin;
  if ((isMax || isMin) && count == 0) throw Error(std::string(op.info().name) + " over an empty axis");

  if (isFloat(x.type.dtype)) {
    if (isMax || isMin) {
      // NaN propagates: once the accumulator is NaN no comparison replaces it.
      float init = isMax ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
      std::fill(out.f.begin(), out.f.end(), init);
      forEachStrided(x.type.shape, ostride, 0, [&](size_t k, int64_t o) {
        float v = x.f[k], &acc = out.f[size_t(o)];
        if (v != v || (isMax ? v > acc : v < acc)) acc = v;
      });
      for (float& v : out.f) v = roundToDType(v, rt.dtype);  // already in the dtype; cheap
    } else {
      std::vector<double> acc(out.size(), 0.0);
      forEachStrided(x.type.shape, ostride, 0, [&](size_t k, int64_t o) { acc[size_t(o)] += double(x.f[k]); });
      double div = op.kind == OpKind::Mean ? double(count) : 1.0;
      for (size_t k = 0; k < out.size(); ++k) out.f[k] = roundDouble(acc[k] / div, rt.dtype);
    }
  } else {
    if (isMax || isMin) {
      std::vector<int64_t> acc(out.size(), isMax ? std::numeric_limits<int64_t>::min()
                                                 : std::numeric_limits<int64_t>::max());
      forEachStrided(x.type.shape, ostride, 0, [&](size_t k, int64_t o) {
        int64_t v = x.i[k], &a = acc[size_t(o)];
        a = isMax ? std::max(a, v) : std::min(a, v);
      });
      for (size_t k = 0; k < out.size(); ++k) out.i[k] = storeInt(acc[k], rt.dtype);
    } else {
      if (op.kind == OpKind::Mean) internal(op, "mean of an integer type");
      std::vector<uint64_t> acc(out.size(), 0);  // wraps instead of overflowing
      forEachStrided(x.type.shape, ostride, 0, [&](size_t k, int64_t o) { acc[size_t(o)] += uint64_t(x.i[k]); });
      for (size_t k = 0; k < out.size(); ++k) out.i[k] = storeInt(int64_t(acc[k]), rt.dtype);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Layout

HostTensor reshape(const Op& op, const HostTensor& x) {
  HostTensor out = x;
  out.type = op.result()->type;
  if (out.type.numel() != x.type.numel()) internal(op, "element count changes");
  return out;
}

HostTensor permute(const Op& op, const HostTensor& x) {
  const Type& rt = op.result()->type;
  HostTensor out = HostTensor::zeros(rt);
  const auto& perm = op.attrInts("perm");
  if (int(perm.size()) != x.type.rank()) internal(op, "perm has the wrong length");
  std::vector<int64_t> xs = stridesOf(x.type.shape), st(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) st[i] = xs.at(size_t(perm[i]));  // result dim i = input dim perm[i]
  onStorage(rt.dtype, x, out, [&](const auto& s, auto& d) {
    forEachStrided(rt.shape, st, 0, [&](size_t k, int64_t o) { d[k] = s[size_t(o)]; });
  });
  return out;
}

HostTensor broadcast(const Op& op, const HostTensor& x) {
  const Type& rt = op.result()->type;
  HostTensor out = HostTensor::zeros(rt);
  const int r = rt.rank(), xr = x.type.rank(), off = r - xr;
  if (off < 0) internal(op, "broadcast lowers the rank");
  std::vector<int64_t> xs = stridesOf(x.type.shape), st(size_t(r), 0);  // new leading dims: stride 0
  for (int d = 0; d < xr; ++d) {
    int64_t xd = x.type.shape[size_t(d)];
    if (xd != rt.shape[size_t(d + off)] && xd != 1) internal(op, "cannot broadcast " + x.type.str() + " to " + rt.str());
    st[size_t(d + off)] = xd == 1 ? 0 : xs[size_t(d)];  // size-1 dims repeat
  }
  onStorage(rt.dtype, x, out, [&](const auto& s, auto& d) {
    forEachStrided(rt.shape, st, 0, [&](size_t k, int64_t o) { d[k] = s[size_t(o)]; });
  });
  return out;
}

HostTensor slice(const Op& op, const HostTensor& x) {
  const Type& rt = op.result()->type;
  HostTensor out = HostTensor::zeros(rt);
  int axis = normalizeAxis(op.attrInt("axis"), x.type.rank(), "slice");
  int64_t start = op.attrInt("start"), step = op.attrInt("step"), n = rt.shape[size_t(axis)];
  int64_t dim = x.type.shape[size_t(axis)];
  if (n > 0 && (start < 0 || step <= 0 || start + (n - 1) * step >= dim || start + (n - 1) * step >= op.attrInt("end")))
    internal(op, "slice reads outside its operand");
  std::vector<int64_t> st = stridesOf(x.type.shape);
  int64_t base = start * st[size_t(axis)];
  if (n > 1) st[size_t(axis)] *= step;  // one element: the stride is unused (and could overflow)
  onStorage(rt.dtype, x, out, [&](const auto& s, auto& d) {
    forEachStrided(rt.shape, st, base, [&](size_t k, int64_t o) { d[k] = s[size_t(o)]; });
  });
  return out;
}

HostTensor concat(const Op& op, const std::vector<const HostTensor*>& in) {
  const Type& rt = op.result()->type;
  HostTensor out = HostTensor::zeros(rt);
  int axis = normalizeAxis(op.attrInt("axis"), rt.rank(), "concat");
  AxisSplit whole = splitAt(rt.shape, axis);
  int64_t at = 0;  // running position along the axis
  for (const HostTensor* t : in) {
    AxisSplit part = splitAt(t->type.shape, axis);
    if (part.outer != whole.outer || part.inner != whole.inner) internal(op, "operands disagree outside the axis");
    onStorage(rt.dtype, *t, out, [&](const auto& s, auto& d) {
      const int64_t block = part.len * part.inner;  // one contiguous run per outer index
      for (int64_t o = 0; o < whole.outer; ++o)
        std::copy_n(s.begin() + o * block, block, d.begin() + (o * whole.len + at) * whole.inner);
    });
    at += part.len;
  }
  if (at != whole.len) internal(op, "operand sizes do not add up to the result");
  return out;
}

void checkIndex(const char* what, int64_t j, int64_t dim) {
  if (j < 0 || j >= dim)
    throw Error(std::string(what) + " index " + std::to_string(j) + " out of range [0, " + std::to_string(dim) + ")");
}

// take_along_axis: result[p] = x[p with coordinate `axis` replaced by idx[p]].
HostTensor gather(const Op& op, const HostTensor& x, const HostTensor& idx) {
  const Type& rt = op.result()->type;
  HostTensor out = HostTensor::zeros(rt);
  int axis = normalizeAxis(op.attrInt("axis"), x.type.rank(), "gather");
  std::vector<int64_t> xs = stridesOf(x.type.shape), st = xs;
  st[size_t(axis)] = 0;  // the axis coordinate comes from idx
  const int64_t dim = x.type.shape[size_t(axis)], axisStride = xs[size_t(axis)];
  onStorage(rt.dtype, x, out, [&](const auto& s, auto& d) {
    forEachStrided(idx.type.shape, st, 0, [&](size_t k, int64_t o) {
      int64_t j = idx.i[k];
      checkIndex("gather", j, dim);
      d[k] = s[size_t(o + j * axisStride)];
    });
  });
  return out;
}

// result = base; result[p with axis coordinate idx[p]] += src[p]. Float sums accumulate in
// double per output element and round once, so the result does not depend on the order.
HostTensor scatterAdd(const Op& op, const HostTensor& base, const HostTensor& idx, const HostTensor& src) {
  const Type& rt = op.result()->type;
  HostTensor out = HostTensor::zeros(rt);
  int axis = normalizeAxis(op.attrInt("axis"), base.type.rank(), "scatter_add");
  std::vector<int64_t> bs = stridesOf(base.type.shape), st = bs;
  st[size_t(axis)] = 0;
  const int64_t dim = base.type.shape[size_t(axis)], axisStride = bs[size_t(axis)];
  if (isFloat(rt.dtype)) {
    std::vector<double> acc(base.f.begin(), base.f.end());
    forEachStrided(src.type.shape, st, 0, [&](size_t k, int64_t o) {
      int64_t j = idx.i[k];
      checkIndex("scatter_add", j, dim);
      acc[size_t(o + j * axisStride)] += double(src.f[k]);
    });
    for (size_t k = 0; k < out.size(); ++k) out.f[k] = roundDouble(acc[k], rt.dtype);
  } else {
    std::vector<uint64_t> acc(base.i.begin(), base.i.end());
    forEachStrided(src.type.shape, st, 0, [&](size_t k, int64_t o) {
      int64_t j = idx.i[k];
      checkIndex("scatter_add", j, dim);
      acc[size_t(o + j * axisStride)] += uint64_t(src.i[k]);
    });
    for (size_t k = 0; k < out.size(); ++k) out.i[k] = storeInt(int64_t(acc[k]), rt.dtype);
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Matmul

// acc[n] += x * row[n] in double for n < count: the interpreter's GEMM inner loop. Each acc[n]
// is its own sum, so vector instructions change no result; -O2 leaves this loop scalar, and
// the CPU runs of real models spend most of their time here.
#if defined(__clang__)  // clang vectorises at -O2 and has no optimize attribute
#define FUSEC_VECTORIZE
#else
#define FUSEC_VECTORIZE [[gnu::optimize("tree-vectorize")]]
#endif
FUSEC_VECTORIZE void accumulateRow(double* acc, double x, const float* row, int64_t count) {
  for (int64_t n = 0; n < count; ++n) acc[n] += x * double(row[n]);
}

// C[M x N] (row-major) = A * B through cpuDgemm, in blocks of at most kBlasRows x kBlasCols of
// C: `a(m, k)` reads A, B is K rows of N contiguous floats. False (C untouched) without a BLAS.
constexpr int64_t kBlasRows = 512, kBlasCols = 4096;

template <class ReadA>
bool blasBlocks(int64_t M, int64_t N, int64_t K, ReadA a, const float* B, float* C, DType dtype) {
  if (cpuBlasName().empty()) return false;
  const int64_t nb = std::min(N, kBlasCols), mb = std::min(M, kBlasRows);
  std::vector<double> Bd(size_t(K * nb)), Ad(size_t(mb * K)), Cd(size_t(mb * nb));
  for (int64_t n0 = 0; n0 < N; n0 += nb) {
    const int64_t nn = std::min(nb, N - n0);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < nn; ++n) Bd[size_t(k * nn + n)] = double(B[k * N + n0 + n]);
    for (int64_t m0 = 0; m0 < M; m0 += mb) {
      const int64_t mm = std::min(mb, M - m0);
      for (int64_t m = 0; m < mm; ++m)
        for (int64_t k = 0; k < K; ++k) Ad[size_t(m * K + k)] = double(a(m0 + m, k));
      if (!cpuDgemm(mm, nn, K, Ad.data(), Bd.data(), Cd.data())) return false;  // only before the first block
      for (int64_t m = 0; m < mm; ++m)
        for (int64_t n = 0; n < nn; ++n) C[(m0 + m) * N + n0 + n] = roundDouble(Cd[size_t(m * nn + n)], dtype);
    }
  }
  return true;
}

HostTensor matmul(const Op& op, const HostTensor& a, const HostTensor& b) {
  // Computed in the logical layout [batch..., M, N], then permuted by out_perm (if any).
  const auto& outPerm = op.attrInts("out_perm");
  Type rt = op.result()->type;
  if (!outPerm.empty()) {
    if (outPerm.size() != rt.shape.size()) internal(op, "out_perm has the wrong length");
    for (size_t i = 0; i < outPerm.size(); ++i) rt.shape.at(size_t(outPerm[i])) = op.result()->type.shape[i];
  }
  HostTensor out = HostTensor::zeros(rt);
  const bool ta = op.attrBool("transpose_a"), tb = op.attrBool("transpose_b");
  const Shape &as = a.type.shape, &bs = b.type.shape;
  const int ra = int(as.size()), rb = int(bs.size());
  if (ra < 2 || rb < 2 || !isFloat(rt.dtype)) internal(op, "operands must be float and of rank >= 2");
  const int64_t M = ta ? as[size_t(ra - 1)] : as[size_t(ra - 2)], K = ta ? as[size_t(ra - 2)] : as[size_t(ra - 1)];
  const int64_t N = tb ? bs[size_t(rb - 2)] : bs[size_t(rb - 1)];
  // Element strides of a(m, k) and b(k, n) in their stored layouts.
  const int64_t am = ta ? 1 : K, ak = ta ? M : 1, bk = tb ? 1 : N, bn = tb ? K : 1;
  // A rank-2 operand has no batch dims and is reused for every batch of the other one.
  const int64_t aStep = ra > 2 ? M * K : 0, bStep = rb > 2 ? K * N : 0;
  const int64_t batch = M * N == 0 ? 0 : rt.numel() / (M * N);
  // Each row of C accumulates in double (products of two floats are exact in double) over k in
  // order, then rounds once: B is first laid out as contiguous rows of n (a transposed B
  // copied), so the inner loop runs along contiguous memory, and rows of C are shared among
  // the machine's threads. The same sums as the textbook triple loop, in the same order.
  std::vector<float> Bt;
  const int threads = int(std::min<int64_t>(std::max(1u, std::thread::hardware_concurrency()), std::max<int64_t>(M, 1)));
  const bool large = M * N * K >= (int64_t(1) << 22);  // worth threads, or a BLAS call
  const bool parallel = threads > 1 && large;
  for (int64_t s = 0; s < batch; ++s) {
    const float* A = a.f.data() + s * aStep;
    const float* B = b.f.data() + s * bStep;
    if (bn != 1) {  // rows of n contiguous
      Bt.resize(size_t(K * N));
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n) Bt[size_t(k * N + n)] = B[k * bk + n * bn];
      B = Bt.data();
    }
    float* C = out.f.data() + s * M * N;
    // A large GEMM through the machine's BLAS (ir/cpu_blas.h) in double, block by block so
    // that the double copies stay small (lm_head's C alone would be 0.8 GB at small batch 8).
    if (large && blasBlocks(M, N, K, [&](int64_t m, int64_t k) { return A[m * am + k * ak]; }, B, C, rt.dtype)) continue;
    auto rowsOf = [&](int64_t m0, int64_t m1) {
      std::vector<double> acc(static_cast<size_t>(N));
      for (int64_t m = m0; m < m1; ++m) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t k = 0; k < K; ++k) accumulateRow(acc.data(), double(A[m * am + k * ak]), B + k * N, N);
        for (int64_t n = 0; n < N; ++n) C[m * N + n] = roundDouble(acc[size_t(n)], rt.dtype);
      }
    };
    if (!parallel) {
      rowsOf(0, M);
      continue;
    }
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(rowsOf, M * t / threads, M * (t + 1) / threads);
    for (std::thread& t : pool) t.join();
  }
  if (outPerm.empty()) return out;
  HostTensor permuted = HostTensor::zeros(op.result()->type);
  std::vector<int64_t> ls = stridesOf(rt.shape), st(outPerm.size());
  for (size_t i = 0; i < outPerm.size(); ++i) st[i] = ls[size_t(outPerm[i])];
  forEachStrided(permuted.type.shape, st, 0, [&](size_t k, int64_t o) { permuted.f[k] = out.f[size_t(o)]; });
  return permuted;
}

// ---------------------------------------------------------------------------------------
// Composites: elementwise math in f32, accumulations (and what combines them) in double,
// each result rounded once to the dtype.

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

HostTensor softmaxLike(const Op& op, const HostTensor& x) {
  const Type& rt = op.result()->type;
  HostTensor out = HostTensor::zeros(rt);
  if (op.kind == OpKind::Silu) {
    // x * sigmoid(x), with sigmoid as in ops.def; f32 throughout.
    for (size_t k = 0; k < out.size(); ++k) {
      float a = x.f[k];
      out.f[k] = roundToDType(a * (1 / (1 + std::exp(-a))), rt.dtype);
    }
    return out;
  }
  const bool logForm = op.kind == OpKind::LogSoftmax;
  int axis = normalizeAxis(op.attrInt("axis"), x.type.rank(), op.info().name.data());
  AxisSplit sp = splitAt(x.type.shape, axis);
  for (int64_t o = 0; o < sp.outer; ++o)
    for (int64_t i = 0; i < sp.inner; ++i) {
      const int64_t base = o * sp.len * sp.inner + i;
      auto at = [&](int64_t j) { return size_t(base + j * sp.inner); };
      float m = kNegInf;  // subtract the max for stability; NaN propagates
      for (int64_t j = 0; j < sp.len; ++j)
        if (x.f[at(j)] != x.f[at(j)] || x.f[at(j)] > m) m = x.f[at(j)];
      double s = 0;
      for (int64_t j = 0; j < sp.len; ++j) s += double(std::exp(x.f[at(j)] - m));
      for (int64_t j = 0; j < sp.len; ++j) {
        float z = x.f[at(j)] - m;
        out.f[at(j)] = roundDouble(logForm ? double(z) - std::log(s) : double(std::exp(z)) / s, rt.dtype);
      }
    }
  return out;
}

// torch.nn.functional.gelu in f32: "none" is x/2 (1 + erf(x/sqrt 2)), "tanh" is
// x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); the type rule admits nothing else.
HostTensor gelu(const Op& op, const HostTensor& x) {
  const Type& rt = op.result()->type;
  HostTensor out = HostTensor::zeros(rt);
  const bool tanhForm = op.attrStr("approximate") == "tanh";
  const float invSqrt2 = float(1 / std::sqrt(2.0)), alpha = float(std::sqrt(2 / std::numbers::pi)), cubic = 0.044715f;
  for (size_t k = 0; k < out.size(); ++k) {
    const float a = x.f[k];
    const float y = tanhForm ? 0.5f * a * (1 + std::tanh(alpha * (a + cubic * (a * a * a))))
                             : a * 0.5f * (1 + std::erf(a * invSqrt2));
    out.f[k] = roundToDType(y, rt.dtype);
  }
  return out;
}

// Over the last axis: mean and biased variance in double, one rounding per result.
HostTensor layernorm(const Op& op, const HostTensor& x, const HostTensor& w, const HostTensor& b) {
  const Type& rt = op.result()->type;
  HostTensor out = HostTensor::zeros(rt);
  const int64_t d = x.type.shape.back(), rows = d == 0 ? 0 : x.type.numel() / d;
  const double eps = op.attrFloat("eps");
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.f.data() + r * d;
    double mu = 0, var = 0;
    for (int64_t j = 0; j < d; ++j) mu += double(row[j]);
    mu /= double(d);
    for (int64_t j = 0; j < d; ++j) var += (double(row[j]) - mu) * (double(row[j]) - mu);
    const double inv = 1.0 / std::sqrt(var / double(d) + eps);
    for (int64_t j = 0; j < d; ++j)
      out.f[size_t(r * d + j)] =
          roundDouble((double(row[j]) - mu) * inv * double(w.f[size_t(j)]) + double(b.f[size_t(j)]), rt.dtype);
  }
  return out;
}

HostTensor rmsnorm(const Op& op, const HostTensor& x, const HostTensor& g) {
  const Type& rt = op.result()->type;
  HostTensor out = HostTensor::zeros(rt);
  const int64_t d = x.type.shape.back(), rows = d == 0 ? 0 : x.type.numel() / d;
  const double eps = op.attrFloat("eps");
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.f.data() + r * d;
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += double(row[j]) * double(row[j]);
    const double inv = 1.0 / std::sqrt(ss / double(d) + eps);
    for (int64_t j = 0; j < d; ++j)
      out.f[size_t(r * d + j)] = roundDouble(double(row[j]) * inv * double(g.f[size_t(j)]), rt.dtype);
  }
  return out;
}

// Rotates each pair (x[2i], x[2i+1]) of position t by pos[t] * theta^(-2i/d); f32 math.
HostTensor rope(const Op& op, const HostTensor& x, const HostTensor& pos) {
  const Type& rt = op.result()->type;
  HostTensor out = HostTensor::zeros(rt);
  const int r = x.type.rank();
  const int64_t d = x.type.shape[size_t(r - 1)], T = x.type.shape[size_t(r - 2)];
  const int64_t batch = T * d == 0 ? 0 : x.type.numel() / (T * d);
  const float theta = float(op.attrFloat("theta"));
  std::vector<float> invFreq(size_t(d / 2));
  for (int64_t i = 0; i < d / 2; ++i) invFreq[size_t(i)] = std::pow(theta, -float(2 * i) / float(d));
  for (int64_t s = 0; s < batch; ++s)
    for (int64_t t = 0; t < T; ++t) {
      const size_t row = size_t((s * T + t) * d);
      const float p = float(pos.i[size_t(t)]);
      for (int64_t i = 0; i < d / 2; ++i) {
        const float angle = p * invFreq[size_t(i)], c = std::cos(angle), sn = std::sin(angle);
        const float x0 = x.f[row + size_t(2 * i)], x1 = x.f[row + size_t(2 * i + 1)];
        out.f[row + size_t(2 * i)] = roundToDType(x0 * c - x1 * sn, rt.dtype);
        out.f[row + size_t(2 * i + 1)] = roundToDType(x0 * sn + x1 * c, rt.dtype);
      }
    }
  return out;
}

// mean over rows of logsumexp(row) - row[target].
HostTensor crossEntropy(const Op& op, const HostTensor& logits, const HostTensor& targets) {
  const Type& rt = op.result()->type;
  HostTensor out = HostTensor::zeros(rt);
  const int64_t V = logits.type.shape.back(), rows = targets.type.numel();
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.f.data() + r * V;
    const int64_t t = targets.i[size_t(r)];
    checkIndex("cross_entropy target", t, V);
    float m = kNegInf;
    for (int64_t j = 0; j < V; ++j)
      if (row[j] != row[j] || row[j] > m) m = row[j];
    double s = 0;
    for (int64_t j = 0; j < V; ++j) s += double(std::exp(row[j] - m));
    total += double(m) + std::log(s) - double(row[t]);
  }
  out.f[0] = roundDouble(total / double(rows), rt.dtype);  // no rows: 0/0 = NaN
  return out;
}

// The shapes of attention's operands: `batch` independent problems of Tq queries and Tk
// keys, widths d (q, k) and dv (v, o).
// Grouped-query attention: query problem s reads key/value problem s / group (the kv heads
// are q's last batch dim divided by `group`, ops.def).
struct AttentionDims {
  int64_t batch, Tq, Tk, d, dv, group;
  explicit AttentionDims(const Op& op) {
    const Type &q = op.operands[0]->type, &k = op.operands[1]->type, &v = op.operands[2]->type;
    const int r = q.rank();
    Tq = q.shape[size_t(r - 2)], d = q.shape[size_t(r - 1)];
    Tk = k.shape[size_t(r - 2)], dv = v.shape[size_t(r - 1)];
    batch = Tq * d == 0 ? 0 : q.numel() / (Tq * d);
    group = attentionGroup(q, k);
  }
  // Keys query i sees: j < visible(i). Causal: the queries are the last Tq of Tk positions.
  int64_t visible(int64_t i, bool causal) const { return causal ? std::clamp<int64_t>(i + (Tk - Tq) + 1, 0, Tk) : Tk; }
};

// Row i's scores q_i . k_j * scale over its visible keys, in double.
void attentionScores(const float* Q, const float* K, int64_t i, int64_t visible, int64_t d, double scale,
                     std::vector<double>& score) {
  for (int64_t j = 0; j < visible; ++j) {
    double dot = 0;
    for (int64_t c = 0; c < d; ++c) dot += double(Q[i * d + c]) * double(K[j * d + c]);
    score[size_t(j)] = dot * scale;
  }
}

// o = softmax(q k^T * scale, causal mask) v and lse = log of each row's softmax denominator
// (with the row max: m + log(sum exp(s - m))). The scores are dot-product accumulators, so the
// softmax and the weighted sum stay in double. A row whose keys are all masked (only
// possible when Tq > Tk) is NaN in o and -inf in lse, as softmax over all -inf is.
std::vector<HostTensor> attention(const Op& op, const HostTensor& q, const HostTensor& k, const HostTensor& v) {
  const Type& rt = op.result()->type;
  HostTensor out = HostTensor::zeros(rt), lse = HostTensor::zeros(op.result(1)->type);
  const AttentionDims n(op);
  const bool causal = op.attrBool("causal");
  const double scale = op.attrFloat("scale");
  std::vector<double> score(static_cast<size_t>(n.Tk)), acc(static_cast<size_t>(n.dv));
  for (int64_t s = 0; s < n.batch; ++s) {
    const int64_t kv = s / n.group;
    const float* Q = q.f.data() + s * n.Tq * n.d;
    const float* K = k.f.data() + kv * n.Tk * n.d;
    const float* V = v.f.data() + kv * n.Tk * n.dv;
    float* O = out.f.data() + s * n.Tq * n.dv;
    for (int64_t i = 0; i < n.Tq; ++i) {
      const int64_t visible = n.visible(i, causal);
      attentionScores(Q, K, i, visible, n.d, scale, score);
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < visible; ++j)
        if (score[size_t(j)] != score[size_t(j)] || score[size_t(j)] > m) m = score[size_t(j)];
      std::fill(acc.begin(), acc.end(), 0.0);
      double sum = 0;
      for (int64_t j = 0; j < visible; ++j) {
        double p = std::exp(score[size_t(j)] - m);
        sum += p;
        for (int64_t c = 0; c < n.dv; ++c) acc[size_t(c)] += p * double(V[j * n.dv + c]);
      }
      for (int64_t c = 0; c < n.dv; ++c)
        O[i * n.dv + c] = visible == 0 ? std::numeric_limits<float>::quiet_NaN() : roundDouble(acc[size_t(c)] / sum, rt.dtype);
      lse.f[size_t(s * n.Tq + i)] = visible == 0 ? kNegInf : float(m + std::log(sum));
    }
  }
  return {std::move(out), std::move(lse)};
}

// attention_backward(q, k, v, o, do, lse): P = exp(s - lse) over the visible keys (s the
// scaled scores), D = rowsum(do * o), dv = P^T do, dS = P (do v^T - D),
// dq = dS k scale, dk = dS^T q scale; all accumulated in double, rounded once.
std::vector<HostTensor> attentionBackward(const Op& op, const std::vector<const HostTensor*>& in) {
  const HostTensor &q = *in[0], &k = *in[1], &v = *in[2], &o = *in[3], &dO = *in[4], &lse = *in[5];
  const AttentionDims n(op);
  const bool causal = op.attrBool("causal");
  const double scale = op.attrFloat("scale");
  std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
  std::vector<double> score(static_cast<size_t>(n.Tk));
  for (int64_t s = 0; s < n.batch; ++s) {
    const int64_t kv = s / n.group;  // dk, dv sum over the group's query heads
    const float* Q = q.f.data() + s * n.Tq * n.d;
    const float* K = k.f.data() + kv * n.Tk * n.d;
    const float* V = v.f.data() + kv * n.Tk * n.dv;
    const float* O = o.f.data() + s * n.Tq * n.dv;
    const float* G = dO.f.data() + s * n.Tq * n.dv;
    double* DQ = dq.data() + s * n.Tq * n.d;
    double* DK = dk.data() + kv * n.Tk * n.d;
    double* DV = dv.data() + kv * n.Tk * n.dv;
    for (int64_t i = 0; i < n.Tq; ++i) {
      const int64_t visible = n.visible(i, causal);
      attentionScores(Q, K, i, visible, n.d, scale, score);
      double D = 0;
      for (int64_t c = 0; c < n.dv; ++c) D += double(G[i * n.dv + c]) * double(O[i * n.dv + c]);
      const double L = double(lse.f[size_t(s * n.Tq + i)]);
      for (int64_t j = 0; j < visible; ++j) {
        const double p = std::exp(score[size_t(j)] - L);
        double dp = 0;
        for (int64_t c = 0; c < n.dv; ++c) {
          dp += double(G[i * n.dv + c]) * double(V[j * n.dv + c]);
          DV[j * n.dv + c] += p * double(G[i * n.dv + c]);
        }
        const double ds = p * (dp - D) * scale;
        for (int64_t c = 0; c < n.d; ++c) {
          DQ[i * n.d + c] += ds * double(K[j * n.d + c]);
          DK[j * n.d + c] += ds * double(Q[i * n.d + c]);
        }
      }
    }
  }
  std::vector<HostTensor> out;
  for (int r = 0; r < 3; ++r) {
    const std::vector<double>& acc = r == 0 ? dq : r == 1 ? dk : dv;
    HostTensor t = HostTensor::zeros(op.result(r)->type);
    for (size_t x = 0; x < acc.size(); ++x) t.f[x] = roundDouble(acc[x], t.type.dtype);
    out.push_back(std::move(t));
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Collectives: the ranks' threads meet at each one

// Thrown on the ranks that did not fail when another one did: interpretRanks reports the
// error that started it instead.
struct PeerFailed {};

// Where the ranks' threads meet: each deposits its operands of the collective it reached and
// waits until all have (a barrier), computes its own results from every rank's operands, and
// waits again before anyone may deposit the next ones. A rank that fails wakes the others.
class RankExchange {
 public:
  explicit RankExchange(int ranks) : ranks_(ranks), ops_(size_t(ranks)), deposits_(size_t(ranks)) {}
  int ranks() const { return ranks_; }

  std::vector<HostTensor> exchange(int rank, const Op& op, const std::vector<const HostTensor*>& in) {
    std::unique_lock<std::mutex> lock(m_);
    ops_[size_t(rank)] = &op;
    deposits_[size_t(rank)] = in;
    await(lock);
    for (const Op* other : ops_)
      if (other != &op) {
        failed_ = true;
        cv_.notify_all();
        internal(op, "the ranks reached different collectives (their programs differ)");
      }
    lock.unlock();
    std::vector<HostTensor> out = compute(rank, op);  // deposits are stable until the next await
    lock.lock();
    await(lock);
    return out;
  }

  void fail() {
    std::lock_guard<std::mutex> lock(m_);
    failed_ = true;
    cv_.notify_all();
  }

 private:
  void await(std::unique_lock<std::mutex>& lock) {
    if (failed_) throw PeerFailed{};
    const uint64_t generation = generation_;
    if (++arrived_ == ranks_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != generation || failed_; });
    }
    if (failed_) throw PeerFailed{};
  }

  // Operand k summed over the ranks in rank order, in double.
  std::vector<double> sum(size_t k) const {
    std::vector<double> acc(deposits_[0][k]->size(), 0.0);
    for (const auto& d : deposits_)
      for (size_t e = 0; e < acc.size(); ++e) acc[e] += double(d[k]->f[e]);
    return acc;
  }

  std::vector<HostTensor> compute(int rank, const Op& op) const {
    const double n = double(ranks_);
    std::vector<HostTensor> out;
    if (op.kind == OpKind::AllReduce) {
      const bool mean = op.attrStr("reduce") == "mean";
      for (size_t k = 0; k < op.operands.size(); ++k) {
        std::vector<double> acc = sum(k);
        HostTensor t = HostTensor::zeros(op.result(int(k))->type);
        for (size_t e = 0; e < acc.size(); ++e) t.f[e] = roundDouble(mean ? acc[e] / n : acc[e], t.type.dtype);
        out.push_back(std::move(t));
      }
    } else if (op.kind == OpKind::ReduceScatter) {
      const bool mean = op.attrStr("reduce") == "mean";
      for (size_t k = 0; k < op.operands.size(); ++k) {
        std::vector<double> acc = sum(k);
        HostTensor t = HostTensor::zeros(op.result(int(k))->type);
        const size_t block = t.size();
        for (size_t e = 0; e < block; ++e) {
          const double v = acc[size_t(rank) * block + e];
          t.f[e] = roundDouble(mean ? v / n : v, t.type.dtype);
        }
        out.push_back(std::move(t));
      }
    } else if (op.kind == OpKind::AllGather) {
      for (size_t k = 0; k < op.operands.size(); ++k) {
        HostTensor t = HostTensor::zeros(op.result(int(k))->type);
        size_t at = 0;
        for (const auto& d : deposits_) {
          std::copy(d[k]->f.begin(), d[k]->f.end(), t.f.begin() + std::ptrdiff_t(at));
          at += d[k]->f.size();
        }
        out.push_back(std::move(t));
      }
    } else {
      internal(op, "not a collective");
    }
    return out;
  }

  const int ranks_;
  std::mutex m_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool failed_ = false;
  std::vector<const Op*> ops_;
  std::vector<std::vector<const HostTensor*>> deposits_;
};

// ---------------------------------------------------------------------------------------
// Graph evaluation

class Evaluator {
 public:
  explicit Evaluator(const Bindings& env, RankExchange* exchange = nullptr, int rank = 0)
      : env_(env), exchange_(exchange), rank_(rank) {}

  // Evaluates `g`. `positional` binds the input ops of a kernel body, in order; at the top
  // level (nullptr) inputs and params come from the named bindings.
  std::vector<HostTensor> run(const Graph& g, const std::vector<const HostTensor*>* positional) {
    PtrMap<const Value*, HostTensor> vals;
    vals.reserve(g.ops.size());
    if (positional) {
      size_t nInputs = g.inputs().size();
      if (nInputs != positional->size())
        throw Error("kernel '" + g.name + "' has " + std::to_string(positional->size()) + " operands but its body has " +
                    std::to_string(nInputs) + " inputs");
    }
    size_t nextInput = 0;
    std::vector<const HostTensor*> ins;
    // A value is dropped after its last reader (the outputs are kept): a training step's
    // temporaries would otherwise all stay in memory to the end.
    PtrMap<const Value*, size_t> lastUse;
    for (size_t k = 0; k < g.ops.size(); ++k)
      for (const Value* v : g.ops[k]->operands) lastUse[v] = k;
    for (const Value* v : g.outputs) lastUse[v] = g.ops.size();
    size_t at = 0;
    for (const auto& owned : g.ops) {
      const Op& op = *owned;
      const size_t here = at++;
      struct DropDead {  // after this op, whether it returns normally or continues
        PtrMap<const Value*, HostTensor>& vals;
        const PtrMap<const Value*, size_t>& lastUse;
        const Op& op;
        size_t here;
        ~DropDead() {
          for (const Value* v : op.operands)
            if (auto it = lastUse.find(v); it != lastUse.end() && it->second == here) vals.erase(v);
          for (auto& r : op.results)
            if (!lastUse.count(r.get())) vals.erase(r.get());  // never read: not kept either
        }
      } drop{vals, lastUse, op, here};
      ins.clear();
      for (const Value* v : op.operands) {
        auto it = vals.find(v);
        if (it == vals.end()) internal(op, "operand used before its definition");
        ins.push_back(&it->second);
      }
      if (op.kind == OpKind::Kernel) {
        if (!op.body) internal(op, "kernel without a body");
        std::vector<HostTensor> outs = run(*op.body, &ins);
        if (outs.size() != op.results.size()) internal(op, "body returns the wrong number of results");
        for (size_t k = 0; k < outs.size(); ++k) {
          if (outs[k].type != op.result(int(k))->type) internal(op, "body result type differs from the kernel's");
          vals.insert_or_assign(op.result(int(k)), std::move(outs[k]));
        }
        continue;
      }
      if (op.numResults() != 1 || op.info().category == OpCategory::Collective) {
        // attention (o, lse), attention_backward (dq, dk, dv), the collectives
        std::vector<HostTensor> outs = op.info().category == OpCategory::Collective ? collective(op, ins) : evalMulti(op, ins);
        if (outs.size() != op.results.size()) internal(op, "wrong number of results");
        for (size_t k = 0; k < outs.size(); ++k) {
          if (outs[k].type != op.result(int(k))->type) internal(op, "computed a result of the wrong type");
          vals.insert_or_assign(op.result(int(k)), std::move(outs[k]));
        }
        continue;
      }
      HostTensor t;
      if (op.kind == OpKind::Input && positional) {
        size_t n = nextInput++;
        t = checkBinding("kernel '" + g.name + "' input " + std::to_string(n), op.result()->type, *(*positional)[n]);
      } else {
        t = evalOp(op, ins);
      }
      if (t.type != op.result()->type) internal(op, "computed " + t.type.str() + ", expected " + op.result()->type.str());
      vals.insert_or_assign(op.result(), std::move(t));
    }
    std::vector<HostTensor> outs;
    outs.reserve(g.outputs.size());
    for (const Value* v : g.outputs) {
      auto it = vals.find(v);
      if (it == vals.end()) throw Error("internal: graph '" + g.name + "' outputs a value it does not define");
      outs.push_back(it->second);
    }
    return outs;
  }

 private:
  HostTensor named(const Op& op) {
    const char* what = op.kind == OpKind::Input ? "input" : "param";
    const std::string& name = op.attrStr("name");
    auto it = env_.find(name);
    if (it == env_.end()) throw Error(std::string("missing value for ") + what + " '" + name + "'");
    return checkBinding(std::string(what) + " '" + name + "'", op.result()->type, it->second);
  }

  HostTensor evalOp(const Op& op, const std::vector<const HostTensor*>& in) {
    const OpInfo& info = op.info();
    if (info.arity >= 0 && in.size() != size_t(info.arity)) internal(op, "wrong number of operands");
    if (info.category == OpCategory::Pointwise) return pointwise(op, in);
    switch (op.kind) {
      case OpKind::Input:
      case OpKind::Param: return named(op);
      case OpKind::Constant: return constantTensor(op);
      case OpKind::Iota: return iotaTensor(op);
      case OpKind::Sum:
      case OpKind::Mean:
      case OpKind::RMax:
      case OpKind::RMin: return reduction(op, *in[0]);
      case OpKind::Reshape: return reshape(op, *in[0]);
      case OpKind::Permute: return permute(op, *in[0]);
      case OpKind::Broadcast: return broadcast(op, *in[0]);
      case OpKind::Slice: return slice(op, *in[0]);
      case OpKind::Concat: return concat(op, in);
      case OpKind::Gather: return gather(op, *in[0], *in[1]);
      case OpKind::ScatterAdd: return scatterAdd(op, *in[0], *in[1], *in[2]);
      case OpKind::Matmul: return matmul(op, *in[0], *in[1]);
      case OpKind::Softmax:
      case OpKind::LogSoftmax:
      case OpKind::Silu: return softmaxLike(op, *in[0]);
      case OpKind::Gelu: return gelu(op, *in[0]);
      case OpKind::RMSNorm: return rmsnorm(op, *in[0], *in[1]);
      case OpKind::LayerNorm: return layernorm(op, *in[0], *in[1], *in[2]);
      case OpKind::Rope: return rope(op, *in[0], *in[1]);
      case OpKind::CrossEntropy: return crossEntropy(op, *in[0], *in[1]);
      case OpKind::Dropout: return dropout(op, *in[0], *in[1]);
      default: internal(op, "no evaluation rule");
    }
  }

  std::vector<HostTensor> evalMulti(const Op& op, const std::vector<const HostTensor*>& in) {
    if (in.size() != size_t(op.info().arity)) internal(op, "wrong number of operands");
    switch (op.kind) {
      case OpKind::Attention: return attention(op, *in[0], *in[1], *in[2]);
      case OpKind::AttentionBackward: return attentionBackward(op, in);
      default: internal(op, "no evaluation rule for several results");
    }
  }

  // A collective over one rank is the identity (a mean over one rank too); over several it
  // needs the other ranks, which only interpretRanks runs.
  std::vector<HostTensor> collective(const Op& op, const std::vector<const HostTensor*>& in) {
    const int64_t ranks = op.attrInt("ranks");
    if (op.kind == OpKind::Shard) {  // no exchange: this rank's block of rows
      if (ranks != (exchange_ ? exchange_->ranks() : 1))
        throw Error("shard is over " + std::to_string(ranks) + " ranks, the job has " +
                    std::to_string(exchange_ ? exchange_->ranks() : 1) +
                    (exchange_ ? "" : " (run the program as a data-parallel job: interpretRanks)"));
      HostTensor t = HostTensor::zeros(op.result()->type);
      const size_t block = t.size();
      std::copy(in[0]->f.begin() + std::ptrdiff_t(size_t(rank_) * block),
                in[0]->f.begin() + std::ptrdiff_t(size_t(rank_ + 1) * block), t.f.begin());
      return {t};
    }
    if (!exchange_) {
      if (ranks != 1)
        throw Error(std::string(op.info().name) + " over " + std::to_string(ranks) +
                    " ranks needs the other ranks: run the program as a data-parallel job (interpretRanks)");
      std::vector<HostTensor> out;
      for (const HostTensor* t : in) out.push_back(*t);
      return out;
    }
    if (ranks != exchange_->ranks())
      throw Error(std::string(op.info().name) + " is over " + std::to_string(ranks) + " ranks, the job has " +
                  std::to_string(exchange_->ranks()));
    return exchange_->exchange(rank_, op, in);
  }

  const Bindings& env_;
  RankExchange* exchange_;
  int rank_;
};

}  // namespace

// ---------------------------------------------------------------------------------------
// Public API

InterpreterCost interpreterCost(const Graph& g) {
  auto bytesOf = [](const Value* v) { return int64_t(v->type.numel()) * (isFloat(v->type.dtype) ? 4 : 8); };
  PtrMap<const Value*, size_t> lastUse;
  for (size_t k = 0; k < g.ops.size(); ++k)
    for (const Value* v : g.ops[k]->operands) lastUse[v] = k;
  for (const Value* v : g.outputs) lastUse[v] = g.ops.size();
  std::vector<int64_t> freedAfter(g.ops.size() + 1, 0);
  for (const auto& [v, k] : lastUse) freedAfter[k] += bytesOf(v);
  InterpreterCost c;
  int64_t live = 0;
  for (size_t k = 0; k < g.ops.size(); ++k) {
    const Op& op = *g.ops[k];
    for (const auto& r : op.results) {
      live += bytesOf(r.get());
      c.valueBytes += bytesOf(r.get());
    }
    c.peakBytes = std::max(c.peakBytes, live);
    for (const auto& r : op.results)
      if (!lastUse.count(r.get())) live -= bytesOf(r.get());
    live -= freedAfter[k];
    if (op.kind == OpKind::Matmul) {
      const Type& a = op.operands[0]->type;
      const int64_t K = op.attrBool("transpose_a") ? a.shape[a.rank() - 2] : a.shape[a.rank() - 1];
      c.gemmFlops += 2 * op.result()->type.numel() * K;
    }
    if (op.body) {  // a kernel's body runs inside: its GEMMs count, its values are transient
      const InterpreterCost b = interpreterCost(*op.body);
      c.gemmFlops += b.gemmFlops;
      c.valueBytes += b.valueBytes;
      c.peakBytes = std::max(c.peakBytes, live + b.peakBytes);
    }
  }
  return c;
}

std::vector<HostTensor> interpret(const Graph& g, const Bindings& env) {
  Evaluator ev(env);
  return ev.run(g, nullptr);
}

std::vector<std::vector<HostTensor>> interpretRanks(const Graph& g, const std::vector<Bindings>& perRank) {
  if (perRank.empty()) throw Error("interpretRanks: a job has at least one rank");
  RankExchange exchange(int(perRank.size()));
  std::vector<std::vector<HostTensor>> outs(perRank.size());
  std::vector<std::exception_ptr> errors(perRank.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < perRank.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        Evaluator ev(perRank[r], &exchange, int(r));
        outs[r] = ev.run(g, nullptr);
      } catch (const PeerFailed&) {
      } catch (...) {
        errors[r] = std::current_exception();
        exchange.fail();
      }
    });
  for (std::thread& t : threads) t.join();
  for (std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return outs;
}

}  // namespace fusec
