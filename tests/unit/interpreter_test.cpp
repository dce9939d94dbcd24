// Tests of the CPU reference interpreter (ir/interpreter.cpp). Every expected value is
// computed here by plain loops (mostly in double) from the op's definition, never through
// the interpreter's own helpers. Inputs are random with a fixed seed and, for floats,
// never zero: magnitudes in [0.5, 2] with random signs.
//
// Every test registers the op kinds it exercises (COVERS / the case tables); the last
// test fails if an op in ir/ops.def has no interpreter test.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ir/builder.h"
#include "ir/cpu_blas.h"
#include "ir/interpreter.h"
#include "test_util.h"

using namespace fusec;

namespace {

// ---------------------------------------------------------------------------------------
// Coverage registry

template <class Case>
std::vector<Case> registered(std::vector<Case> cases) {
  for (const Case& c : cases) coveredKinds().insert(c.kind);
  return cases;
}

// ---------------------------------------------------------------------------------------
// Independent rounding reference: every non-negative finite value of the format, decoded
// from its bit pattern, plus the first overflow value 2^(emax+1) standing in for inf (its
// pattern is even, so ties at the top round to inf as IEEE requires).

struct RefFormat {
  std::vector<double> vals;
  std::vector<uint32_t> bits;
  double overflow = 0;

  double round(double x) const {
    if (std::isnan(x) || std::isinf(x)) return x;
    double ax = std::fabs(x), r;
    auto it = std::lower_bound(vals.begin(), vals.end(), ax);
    if (it == vals.end()) {
      r = overflow;
    } else if (*it == ax) {
      r = ax;
    } else {
      size_t hi = size_t(it - vals.begin()), lo = hi - 1;
      double dlo = ax - vals[lo], dhi = vals[hi] - ax;
      size_t pick = dlo < dhi ? lo : dhi < dlo ? hi : ((bits[lo] & 1) == 0 ? lo : hi);
      r = vals[pick];
    }
    if (r == overflow) r = std::numeric_limits<double>::infinity();
    return std::copysign(r, x);
  }
};

const RefFormat& refF16() {
  static const RefFormat f = [] {
    RefFormat r;
    for (uint32_t b = 0; b < 0x7C00; ++b) {
      uint32_t e = b >> 10, m = b & 0x3FF;
      r.vals.push_back(e == 0 ? std::ldexp(double(m), -24) : std::ldexp(double(1024 + m), int(e) - 25));
      r.bits.push_back(b);
    }
    r.overflow = 65536.0;
    r.vals.push_back(r.overflow);
    r.bits.push_back(0x7C00);
    return r;
  }();
  return f;
}

const RefFormat& refBF16() {
  static const RefFormat f = [] {
    RefFormat r;
    for (uint32_t b = 0; b < 0x7F80; ++b) {
      r.vals.push_back(double(std::bit_cast<float>(b << 16)));
      r.bits.push_back(b);
    }
    r.overflow = std::ldexp(1.0, 128);
    r.vals.push_back(r.overflow);
    r.bits.push_back(0x7F80);
    return r;
  }();
  return f;
}

double refRound(double x, DType d) {
  switch (d) {
    case DType::bf16: return refBF16().round(x);
    case DType::f16: return refF16().round(x);
    default: return double(float(x));
  }
}

// Relative size of one unit in the last place of the dtype.
double ulpRel(DType d) { return d == DType::bf16 ? std::ldexp(1.0, -7) : d == DType::f16 ? std::ldexp(1.0, -10) : 0x1p-23; }

// ---------------------------------------------------------------------------------------
// Tensors and graphs

std::vector<float> randVals(size_t n, std::mt19937& rng, bool positive = false) {
  std::uniform_real_distribution<float> mag(0.5f, 2.0f);
  std::bernoulli_distribution neg(0.5);
  std::vector<float> v(n);
  for (float& x : v) x = (!positive && neg(rng)) ? -mag(rng) : mag(rng);
  return v;
}

HostTensor ftensor(const Type& t, std::vector<float> v) {
  HostTensor h;
  h.type = t;
  for (float& x : v) x = float(refRound(x, t.dtype));
  h.f = std::move(v);
  EXPECT_EQ(h.f.size(), size_t(t.numel()));
  return h;
}

HostTensor itensor(const Type& t, std::vector<int64_t> v) {
  HostTensor h;
  h.type = t;
  h.i = std::move(v);
  EXPECT_EQ(h.i.size(), size_t(t.numel()));
  return h;
}

HostTensor randF(const Type& t, std::mt19937& rng, bool positive = false) {
  return ftensor(t, randVals(size_t(t.numel()), rng, positive));
}

// Random nonzero integers in [-r, r].
HostTensor randI(const Type& t, std::mt19937& rng, int64_t r = 100) {
  std::uniform_int_distribution<int64_t> d(1, r);
  std::bernoulli_distribution neg(0.5);
  std::vector<int64_t> v(size_t(t.numel()));
  for (auto& x : v) x = neg(rng) ? -d(rng) : d(rng);
  return itensor(t, v);
}

HostTensor randIndex(const Type& t, std::mt19937& rng, int64_t n) {
  std::uniform_int_distribution<int64_t> d(0, n - 1);
  std::vector<int64_t> v(size_t(t.numel()));
  for (auto& x : v) x = d(rng);
  return itensor(t, v);
}

HostTensor randBool(const Type& t, std::mt19937& rng) {
  std::bernoulli_distribution d(0.5);
  std::vector<int64_t> v(size_t(t.numel()));
  for (auto& x : v) x = d(rng) ? 1 : 0;
  return itensor(t, v);
}

// One function under construction plus its bindings.
struct Fn : test::GraphUnderTest {
  std::vector<HostTensor> run(const std::vector<Value*>& outs) {
    for (Value* v : outs) b.output(v);
    return interpret(g, env);
  }
  HostTensor run1(Value* v) {
    auto r = run({v});
    EXPECT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].type, v->type);
    return r.at(0);
  }
};

void expectNear(const HostTensor& got, const std::vector<double>& want, double rtol = 1e-6, double atol = 0) {
  ASSERT_TRUE(isFloat(got.type.dtype)) << got.type.str();
  ASSERT_EQ(got.f.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    if (std::isnan(want[k])) {
      EXPECT_TRUE(std::isnan(got.f[k])) << "element " << k << ": got " << got.f[k] << ", want nan";
    } else if (std::isinf(want[k])) {
      EXPECT_EQ(double(got.f[k]), want[k]) << "element " << k;
    } else {
      EXPECT_LE(std::fabs(double(got.f[k]) - want[k]), rtol * std::fabs(want[k]) + atol)
          << "element " << k << ": got " << got.f[k] << ", want " << want[k];
    }
  }
}

// A low-precision result must be a value of its dtype and within one of its ulps of the
// exact result (one rounding of an f32 computation).
void expectLowPrecision(const HostTensor& got, const std::vector<double>& exact) {
  ASSERT_EQ(got.f.size(), exact.size());
  for (size_t k = 0; k < exact.size(); ++k) {
    EXPECT_EQ(double(got.f[k]), refRound(got.f[k], got.type.dtype)) << "element " << k << " is not a "
                                                                     << dtypeName(got.type.dtype) << " value";
  }
  expectNear(got, exact, ulpRel(got.type.dtype));
}

template <class F>
std::string errorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

std::vector<double> toDouble(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

int64_t wrap32Ref(int64_t v) {
  int64_t m = v % 4294967296LL;
  if (m >= 2147483648LL) m -= 4294967296LL;
  if (m < -2147483648LL) m += 4294967296LL;
  return m;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr float kNaNf = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------------------------------
// Rounding

TEST(InterpRounding, BF16KnownValues) {
  EXPECT_EQ(roundToBF16(1.00390625f), 1.0f);                // 1 + 2^-8: tie, to even
  EXPECT_EQ(roundToBF16(1.01171875f), 1.015625f);           // 1 + 3*2^-8: tie, to even (up)
  EXPECT_EQ(roundToBF16(1.0f + 0x1p-8f + 0x1p-20f), 1.0078125f);  // just above the tie
  EXPECT_EQ(roundToBF16(-1.00390625f), -1.0f);
  EXPECT_EQ(roundToBF16(0.1f), 0.10009765625f);
  EXPECT_EQ(roundToBF16(std::numeric_limits<float>::max()), kInf);
  EXPECT_EQ(roundToBF16(std::bit_cast<float>(0x7F7F0000u)), std::bit_cast<float>(0x7F7F0000u));  // max bf16
  EXPECT_EQ(roundToBF16(kInf), kInf);
  EXPECT_EQ(roundToBF16(-kInf), -kInf);
  EXPECT_TRUE(std::isnan(roundToBF16(kNaNf)));
  EXPECT_TRUE(std::isnan(roundToBF16(std::bit_cast<float>(0x7F800001u))));  // low-payload NaN stays NaN
  EXPECT_EQ(roundToBF16(0x1p-134f), 0.0f);          // half the smallest subnormal: tie to 0
  EXPECT_EQ(roundToBF16(0x1.8p-134f), 0x1p-133f);   // above the tie
  EXPECT_TRUE(std::signbit(roundToBF16(-0x1p-140f)));
}

TEST(InterpRounding, F16KnownValues) {
  EXPECT_EQ(roundToF16(65504.0f), 65504.0f);
  EXPECT_EQ(roundToF16(65519.0f), 65504.0f);
  EXPECT_EQ(roundToF16(65520.0f), kInf);  // tie between max and 2^16: to even = inf
  EXPECT_EQ(roundToF16(-1e5f), -kInf);
  EXPECT_EQ(roundToF16(0x1p-24f), 0x1p-24f);    // smallest subnormal
  EXPECT_EQ(roundToF16(0x1p-25f), 0.0f);        // tie to even (0)
  EXPECT_EQ(roundToF16(0x1.8p-25f), 0x1p-24f);
  EXPECT_EQ(roundToF16(0x1.8p-24f), 0x1p-23f);  // 1.5 quanta: tie to even (2)
  EXPECT_EQ(roundToF16(0x1.4p-24f), 0x1p-24f);
  EXPECT_EQ(roundToF16(1.0f + 0x1p-11f), 1.0f);
  EXPECT_EQ(roundToF16(1.0f + 3 * 0x1p-11f), 1.0f + 0x1p-9f);
  EXPECT_EQ(roundToF16(0.1f), 0.0999755859375f);
  EXPECT_EQ(roundToF16(std::ldexp(1.0f, -14)), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_TRUE(std::signbit(roundToF16(-0.0f)));
  EXPECT_TRUE(std::isnan(roundToF16(kNaNf)));
  EXPECT_EQ(roundToDType(0.1f, DType::f32), 0.1f);
  EXPECT_EQ(roundToDType(0.1f, DType::bf16), 0.10009765625f);
  EXPECT_EQ(roundToDType(0.1f, DType::f16), 0.0999755859375f);
}

// Random magnitudes across the whole range, plus every exact f16 midpoint and its float
// neighbours, against the table reference.
TEST(InterpRounding, MatchesTableReference) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> frac(1.0f, 2.0f);
  std::uniform_int_distribution<int> e16(-30, 17), e16b(-140, 129);
  for (int n = 0; n < 20000; ++n) {
    float s = (n & 1) ? -1.0f : 1.0f;
    float x = s * std::ldexp(frac(rng), e16(rng)), y = s * std::ldexp(frac(rng), e16b(rng));
    ASSERT_EQ(double(roundToF16(x)), refF16().round(x)) << x;
    ASSERT_EQ(double(roundToBF16(y)), refBF16().round(y)) << y;
  }
  const auto& v = refF16().vals;
  for (size_t k = 0; k + 1 < v.size(); ++k) {
    float mid = float((v[k] + v[k + 1]) / 2);  // 12 significant bits: exact in float
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf)}) {
      ASSERT_EQ(double(roundToF16(x)), refF16().round(x)) << x;
      ASSERT_EQ(double(roundToF16(-x)), refF16().round(-x)) << -x;
    }
  }
  const auto& w = refBF16().vals;
  for (size_t k = 0; k + 1 < w.size(); k += 7) {
    float mid = float((w[k] + w[k + 1]) / 2);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf)})
      ASSERT_EQ(double(roundToBF16(x)), refBF16().round(x)) << x;
  }
}

TEST(InterpRounding, HostTensorSet) {
  HostTensor b = HostTensor::zeros(Type{DType::bf16, {2}});
  b.set(0, 1.00390625);
  b.set(1, 1.0 + 0x1p-8 + 0x1p-40);  // from double: rounds once (up), not via f32 (which would tie)
  EXPECT_EQ(b.f[0], 1.0f);
  EXPECT_EQ(b.f[1], 1.0078125f);
  HostTensor i = HostTensor::zeros(Type{DType::i32, {2}});
  i.set(0, -2.7);
  EXPECT_EQ(i.i[0], -2);
  EXPECT_THROW(i.set(1, 3e9), Error);
  EXPECT_EQ(i.get(0), -2.0);
}

// ---------------------------------------------------------------------------------------
// Sources

COVERS(OpKind::Input, OpKind::Param, OpKind::Constant, OpKind::Iota);
TEST(InterpSources, InputParamConstantIota) {
  std::mt19937 rng(1);
  Fn f;
  HostTensor xv = randF({DType::f32, {2, 3}}, rng), wv = randI({DType::i32, {4}}, rng);
  Value* x = f.in("x", xv);
  f.env["w"] = wv;
  Value* w = f.b.param("w", wv.type);
  Value* cf = f.b.constant(0.1, {DType::f32, {2}});
  Value* cb16 = f.b.constant(0.1, {DType::bf16, {2}});
  Value* ch = f.b.constant(0.1, {DType::f16, {}});
  Value* ci = f.b.constant(-3, {DType::i32, {3}});
  Value* cbool = f.b.constant(3, {DType::boolean, {2}});
  Value* io = f.b.iota(1, {DType::f32, {2, 3}});
  Value* io2 = f.b.iota(-1, {DType::i64, {3, 2, 4}});
  Value* io3 = f.b.iota(0, {DType::i32, {3, 2, 4}});
  auto r = f.run({x, w, cf, cb16, ch, ci, cbool, io, io2, io3});
  EXPECT_EQ(r[0].f, xv.f);
  EXPECT_EQ(r[1].i, wv.i);
  EXPECT_EQ(r[2].f, std::vector<float>(2, 0.1f));
  EXPECT_EQ(r[3].f, std::vector<float>(2, 0.10009765625f));
  EXPECT_EQ(r[4].f, std::vector<float>(1, 0.0999755859375f));
  EXPECT_EQ(r[5].i, std::vector<int64_t>(3, -3));
  EXPECT_EQ(r[6].i, std::vector<int64_t>(2, 1));
  EXPECT_EQ(r[7].f, (std::vector<float>{0, 1, 2, 0, 1, 2}));
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 4; ++c) {
        EXPECT_EQ(r[8].i[size_t((a * 2 + b) * 4 + c)], c);
        EXPECT_EQ(r[9].i[size_t((a * 2 + b) * 4 + c)], a);
      }
}

// ---------------------------------------------------------------------------------------
// Pointwise

struct UnaryCase {
  OpKind kind;
  bool positiveOnly;
  double (*ref)(double);
};
const std::vector<UnaryCase> kUnaryFloat = registered<UnaryCase>({
    {OpKind::Neg, false, [](double a) { return -a; }},
    {OpKind::Abs, false, [](double a) { return std::fabs(a); }},
    {OpKind::Relu, false, [](double a) { return a > 0 ? a : 0.0; }},
    {OpKind::Exp, false, [](double a) { return std::exp(a); }},
    {OpKind::Log, true, [](double a) { return std::log(a); }},
    {OpKind::Sqrt, true, [](double a) { return std::sqrt(a); }},
    {OpKind::Rsqrt, true, [](double a) { return 1 / std::sqrt(a); }},
    {OpKind::Recip, false, [](double a) { return 1 / a; }},
    {OpKind::Tanh, false, [](double a) { return std::tanh(a); }},
    {OpKind::Sin, false, [](double a) { return std::sin(a); }},
    {OpKind::Cos, false, [](double a) { return std::cos(a); }},
    {OpKind::Sigmoid, false, [](double a) { return 1 / (1 + std::exp(-a)); }},
    {OpKind::Erf, false, [](double a) { return std::erf(a); }},
});

TEST(InterpPointwise, UnaryFloat) {
  for (const UnaryCase& c : kUnaryFloat)
    for (DType d : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(opInfo(c.kind).name) + " " + std::string(dtypeName(d)));
      std::mt19937 rng(uint32_t(c.kind) * 10 + uint32_t(d));
      Fn f;
      HostTensor xv = randF({d, {3, 5}}, rng, c.positiveOnly);
      Value* y = f.b.unary(c.kind, f.in("x", xv));
      HostTensor r = f.run1(y);
      std::vector<double> want;
      for (float a : xv.f) want.push_back(c.ref(a));
      if (d == DType::f32) expectNear(r, want);
      else expectLowPrecision(r, want);
    }
}

TEST(InterpPointwise, UnaryInt) {
  std::mt19937 rng(2);
  for (DType d : {DType::i64, DType::i32}) {
    Fn f;
    HostTensor xv = randI({d, {4, 3}}, rng, 1000);
    Value* x = f.in("x", xv);
    auto r = f.run({f.b.unary(OpKind::Neg, x), f.b.unary(OpKind::Abs, x), f.b.unary(OpKind::Relu, x)});
    for (size_t k = 0; k < xv.i.size(); ++k) {
      int64_t a = xv.i[k];
      EXPECT_EQ(r[0].i[k], -a);
      EXPECT_EQ(r[1].i[k], a < 0 ? -a : a);
      EXPECT_EQ(r[2].i[k], a > 0 ? a : 0);
    }
  }
  // Negating the most negative value wraps instead of overflowing.
  Fn f;
  Value* x = f.in("x", itensor({DType::i64, {1}}, {std::numeric_limits<int64_t>::min()}));
  Value* y = f.in("y", itensor({DType::i32, {1}}, {-2147483648LL}));
  auto r = f.run({f.b.unary(OpKind::Neg, x), f.b.unary(OpKind::Abs, y)});
  EXPECT_EQ(r[0].i[0], std::numeric_limits<int64_t>::min());
  EXPECT_EQ(r[1].i[0], -2147483648LL);
}

// stop_gradient is the identity to evaluation, bit for bit, for every dtype.
COVERS(OpKind::StopGradient);
TEST(InterpPointwise, StopGradientIsTheIdentity) {
  std::mt19937 rng(3);
  for (DType d : {DType::f32, DType::bf16, DType::i64, DType::i32}) {
    SCOPED_TRACE(std::string(dtypeName(d)));
    Fn f;
    HostTensor xv = isFloat(d) ? randF({d, {3, 5}}, rng) : randI({d, {3, 5}}, rng, 1000);
    HostTensor r = f.run1(f.b.unary(OpKind::StopGradient, f.in("x", xv)));
    EXPECT_EQ(r.f, xv.f);
    EXPECT_EQ(r.i, xv.i);
  }
}

COVERS(OpKind::Not, OpKind::And, OpKind::Or);
TEST(InterpPointwise, Bool) {
  Fn f;
  Value* a = f.in("a", itensor({DType::boolean, {4}}, {0, 0, 1, 1}));
  Value* b = f.in("b", itensor({DType::boolean, {4}}, {0, 1, 0, 1}));
  auto r = f.run({f.b.unary(OpKind::Not, a), f.b.binary(OpKind::And, a, b), f.b.binary(OpKind::Or, a, b)});
  EXPECT_EQ(r[0].i, (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(r[1].i, (std::vector<int64_t>{0, 0, 0, 1}));
  EXPECT_EQ(r[2].i, (std::vector<int64_t>{0, 1, 1, 1}));
}

struct BinaryCase {
  OpKind kind;
  bool floatOnly;
  double (*ref)(double, double);
};
const std::vector<BinaryCase> kBinary = registered<BinaryCase>({
    {OpKind::Add, false, [](double a, double b) { return a + b; }},
    {OpKind::Sub, false, [](double a, double b) { return a - b; }},
    {OpKind::Mul, false, [](double a, double b) { return a * b; }},
    {OpKind::Div, false, [](double a, double b) { return a / b; }},
    {OpKind::Max, false, [](double a, double b) { return std::max(a, b); }},
    {OpKind::Min, false, [](double a, double b) { return std::min(a, b); }},
    {OpKind::Pow, true, [](double a, double b) { return std::pow(a, b); }},
});

TEST(InterpPointwise, BinaryFloat) {
  for (const BinaryCase& c : kBinary)
    for (DType d : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(opInfo(c.kind).name) + " " + std::string(dtypeName(d)));
      std::mt19937 rng(100 + uint32_t(c.kind) * 10 + uint32_t(d));
      Fn f;
      HostTensor av = randF({d, {2, 7}}, rng, c.floatOnly), bv = randF({d, {2, 7}}, rng);
      HostTensor r = f.run1(f.b.binary(c.kind, f.in("a", av), f.in("b", bv)));
      std::vector<double> want;
      for (size_t k = 0; k < av.f.size(); ++k) want.push_back(c.ref(av.f[k], bv.f[k]));
      if (d == DType::f32) expectNear(r, want);
      else expectLowPrecision(r, want);
    }
}

TEST(InterpPointwise, MaxMinPropagateNaN) {
  Fn f;
  Value* a = f.in("a", ftensor({DType::f32, {3}}, {kNaNf, 1.0f, kNaNf}));
  Value* b = f.in("b", ftensor({DType::f32, {3}}, {1.0f, kNaNf, kNaNf}));
  auto r = f.run({f.b.binary(OpKind::Max, a, b), f.b.binary(OpKind::Min, a, b)});
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(std::isnan(r[0].f[size_t(k)])) << k;
    EXPECT_TRUE(std::isnan(r[1].f[size_t(k)])) << k;
  }
}

TEST(InterpPointwise, BinaryInt) {
  for (const BinaryCase& c : kBinary) {
    if (c.floatOnly) continue;
    for (DType d : {DType::i64, DType::i32}) {
      SCOPED_TRACE(std::string(opInfo(c.kind).name) + " " + std::string(dtypeName(d)));
      std::mt19937 rng(200 + uint32_t(c.kind) * 10 + uint32_t(d));
      Fn f;
      HostTensor av = randI({d, {3, 4}}, rng), bv = randI({d, {3, 4}}, rng, 9);
      HostTensor r = f.run1(f.b.binary(c.kind, f.in("a", av), f.in("b", bv)));
      for (size_t k = 0; k < av.i.size(); ++k) {
        int64_t a = av.i[k], b = bv.i[k], want = 0;
        switch (c.kind) {
          case OpKind::Add: want = a + b; break;
          case OpKind::Sub: want = a - b; break;
          case OpKind::Mul: want = a * b; break;
          case OpKind::Div: want = a / b; break;  // truncation toward zero
          case OpKind::Max: want = std::max(a, b); break;
          case OpKind::Min: want = std::min(a, b); break;
          default: FAIL();
        }
        EXPECT_EQ(r.i[k], want) << a << " " << b;
      }
    }
  }
}

TEST(InterpPointwise, IntWrapAndTruncation) {
  const int64_t i64min = std::numeric_limits<int64_t>::min(), i64max = std::numeric_limits<int64_t>::max();
  Fn f;
  Value* a32 = f.in("a32", itensor({DType::i32, {3}}, {2147483647, 65536, -7}));
  Value* b32 = f.in("b32", itensor({DType::i32, {3}}, {1, 65536, 2}));
  Value* a64 = f.in("a64", itensor({DType::i64, {3}}, {i64max, i64min, 7}));
  Value* b64 = f.in("b64", itensor({DType::i64, {3}}, {1, -1, -2}));
  auto r = f.run({f.b.binary(OpKind::Add, a32, b32), f.b.binary(OpKind::Mul, a32, b32),
                  f.b.binary(OpKind::Div, a32, b32), f.b.binary(OpKind::Add, a64, b64),
                  f.b.binary(OpKind::Div, a64, b64), f.b.binary(OpKind::Mul, a64, b64)});
  EXPECT_EQ(r[0].i, (std::vector<int64_t>{wrap32Ref(2147483648LL), 65536 + 65536, -5}));
  EXPECT_EQ(r[1].i, (std::vector<int64_t>{2147483647, wrap32Ref(65536LL * 65536), -14}));
  EXPECT_EQ(r[2].i, (std::vector<int64_t>{2147483647, 1, -3}));
  EXPECT_EQ(r[3].i, (std::vector<int64_t>{i64min, i64max, 5}));  // max + 1 and min + (-1) wrap
  EXPECT_EQ(r[4].i, (std::vector<int64_t>{i64max, i64min, -3}));         // min / -1 wraps
  EXPECT_EQ(r[5].i, (std::vector<int64_t>{i64max, i64min, -14}));
}

struct CompareCase {
  OpKind kind;
  bool (*ref)(double, double);
};
const std::vector<CompareCase> kCompare = registered<CompareCase>({
    {OpKind::Eq, [](double a, double b) { return a == b; }},
    {OpKind::Ne, [](double a, double b) { return a != b; }},
    {OpKind::Lt, [](double a, double b) { return a < b; }},
    {OpKind::Le, [](double a, double b) { return a <= b; }},
    {OpKind::Gt, [](double a, double b) { return a > b; }},
    {OpKind::Ge, [](double a, double b) { return a >= b; }},
});

TEST(InterpPointwise, Compare) {
  for (const CompareCase& c : kCompare)
    for (DType d : {DType::f32, DType::bf16, DType::i64, DType::i32, DType::boolean}) {
      SCOPED_TRACE(std::string(opInfo(c.kind).name) + " " + std::string(dtypeName(d)));
      std::mt19937 rng(300 + uint32_t(c.kind) * 10 + uint32_t(d));
      Type t{d, {3, 4}};
      HostTensor av, bv;
      if (isFloat(d)) {
        av = randF(t, rng), bv = randF(t, rng);
        for (size_t k = 0; k < av.f.size(); k += 3) bv.f[k] = av.f[k];  // some equal pairs
        av.f[1] = kNaNf;                                                 // NaN compares unordered
      } else if (d == DType::boolean) {
        av = randBool(t, rng), bv = randBool(t, rng);
      } else {
        av = randI(t, rng, 4), bv = randI(t, rng, 4);
      }
      Fn f;
      HostTensor r = f.run1(f.b.binary(c.kind, f.in("a", av), f.in("b", bv)));
      ASSERT_EQ(r.type.dtype, DType::boolean);
      for (size_t k = 0; k < size_t(t.numel()); ++k)
        EXPECT_EQ(r.i[k], int64_t(c.ref(av.get(k), bv.get(k)))) << k;
    }
}

COVERS(OpKind::Select);
TEST(InterpPointwise, Select) {
  std::mt19937 rng(4);
  for (DType d : {DType::f32, DType::bf16, DType::i32, DType::boolean}) {
    Type t{d, {5, 3}};
    HostTensor cv = randBool({DType::boolean, {5, 3}}, rng);
    HostTensor av = isFloat(d) ? randF(t, rng) : d == DType::boolean ? randBool(t, rng) : randI(t, rng);
    HostTensor bv = isFloat(d) ? randF(t, rng) : d == DType::boolean ? randBool(t, rng) : randI(t, rng);
    Fn f;
    HostTensor r = f.run1(f.b.select(f.in("c", cv), f.in("a", av), f.in("b", bv)));
    for (size_t k = 0; k < size_t(t.numel()); ++k) EXPECT_EQ(r.get(k), cv.i[k] ? av.get(k) : bv.get(k));
  }
}

COVERS(OpKind::Cast);
TEST(InterpPointwise, CastFloat) {
  std::mt19937 rng(5);
  Fn f;
  std::vector<float> xs = randVals(12, rng);
  xs[0] = -1.7f, xs[1] = 2.5f, xs[2] = 1.00390625f, xs[3] = 65519.0f, xs[4] = 1e6f;
  HostTensor xv = ftensor({DType::f32, {12}}, xs);
  Value* x = f.in("x", xv);
  auto r = f.run({f.b.cast(x, DType::bf16), f.b.cast(x, DType::f16), f.b.cast(x, DType::i64), f.b.cast(x, DType::i32),
                  f.b.cast(x, DType::boolean), f.b.cast(f.b.cast(x, DType::bf16), DType::f32),
                  f.b.cast(f.b.cast(x, DType::bf16), DType::f16)});
  for (size_t k = 0; k < xs.size(); ++k) {
    EXPECT_EQ(double(r[0].f[k]), refBF16().round(xs[k])) << k;
    EXPECT_EQ(double(r[1].f[k]), refF16().round(xs[k])) << k;
    EXPECT_EQ(r[2].i[k], int64_t(std::trunc(double(xs[k])))) << k;
    EXPECT_EQ(r[3].i[k], int64_t(std::trunc(double(xs[k])))) << k;
    EXPECT_EQ(r[4].i[k], 1) << k;
    EXPECT_EQ(double(r[5].f[k]), refBF16().round(xs[k])) << k;
    EXPECT_EQ(double(r[6].f[k]), refF16().round(refBF16().round(xs[k]))) << k;
  }
  EXPECT_EQ(r[2].i[0], -1);
  EXPECT_EQ(r[3].i[1], 2);
  EXPECT_EQ(r[1].f[3], 65504.0f);
  EXPECT_EQ(r[1].f[4], kInf);
}

TEST(InterpPointwise, CastIntAndBool) {
  const int64_t big = (int64_t(1) << 40) + (int64_t(1) << 32) + 1;
  Fn f;
  HostTensor xv = itensor({DType::i64, {6}}, {0, -3, 4294967298LL, big, -big, 16777217});
  Value* x = f.in("x", xv);
  Value* bl = f.in("b", itensor({DType::boolean, {2}}, {0, 1}));
  auto r = f.run({f.b.cast(x, DType::f32), f.b.cast(x, DType::bf16), f.b.cast(x, DType::i32), f.b.cast(x, DType::boolean),
                  f.b.cast(bl, DType::f32), f.b.cast(bl, DType::i64), f.b.cast(f.b.cast(x, DType::i32), DType::i64)});
  EXPECT_EQ(r[0].f, (std::vector<float>{0, -3, 4294967296.0f, float(big), -float(big), 16777216.0f}));
  // Single rounding: big = 2^40 (1 + 2^-8 + 2^-40) is just above a bf16 tie, so it rounds
  // up; converting via f32 would land exactly on the tie and round down to 2^40.
  EXPECT_EQ(r[1].f[3], std::ldexp(1.0f, 40) + std::ldexp(1.0f, 33));
  EXPECT_EQ(r[1].f[4], -(std::ldexp(1.0f, 40) + std::ldexp(1.0f, 33)));
  EXPECT_EQ(r[2].i, (std::vector<int64_t>{0, -3, 2, wrap32Ref(big), wrap32Ref(-big), 16777217}));
  EXPECT_EQ(r[3].i, (std::vector<int64_t>{0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(r[4].f, (std::vector<float>{0, 1}));
  EXPECT_EQ(r[5].i, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(r[6].i, r[2].i);
}

TEST(InterpPointwise, CastUnrepresentableThrows) {
  for (float bad : {kNaNf, kInf, -kInf, 3e9f}) {
    Fn f;
    Value* y = f.b.cast(f.in("x", ftensor({DType::f32, {1}}, {bad})), DType::i32);
    f.b.output(y);
    EXPECT_THROW(interpret(f.g, f.env), Error) << bad;
  }
  for (float bad : {kNaNf, 1e19f}) {
    Fn f;
    f.b.output(f.b.cast(f.in("x", ftensor({DType::f32, {1}}, {bad})), DType::i64));
    EXPECT_THROW(interpret(f.g, f.env), Error) << bad;
  }
  Fn f;  // 3e9 fits in i64; NaN -> bool is true (NaN != 0)
  Value* x = f.in("x", ftensor({DType::f32, {2}}, {3e9f, -2.5f}));
  Value* n = f.in("n", ftensor({DType::f32, {2}}, {kNaNf, -0.0f}));
  auto r = f.run({f.b.cast(x, DType::i64), f.b.cast(n, DType::boolean)});
  EXPECT_EQ(r[0].i, (std::vector<int64_t>{3000000000LL, -2}));
  EXPECT_EQ(r[1].i, (std::vector<int64_t>{1, 0}));
}

TEST(InterpErrors, IntegerDivisionByZero) {
  for (DType d : {DType::i64, DType::i32}) {
    Fn f;
    Value* a = f.in("a", itensor({d, {3}}, {1, 2, 3}));
    Value* b = f.in("b", itensor({d, {3}}, {1, 0, 1}));
    f.b.output(f.b.binary(OpKind::Div, a, b));
    EXPECT_EQ(errorOf([&] { interpret(f.g, f.env); }), "integer division by zero");
  }
  Fn f;  // float division by zero is IEEE, not an error
  Value* a = f.in("a", ftensor({DType::f32, {2}}, {1, -1}));
  Value* b = f.in("b", ftensor({DType::f32, {2}}, {0, 0}));
  expectNear(f.run1(f.b.binary(OpKind::Div, a, b)), {INFINITY, -INFINITY});
}

// ---------------------------------------------------------------------------------------
// Reductions

// Reference reduction over `axes` (already non-negative) of a row-major tensor.
std::vector<double> refReduce(const std::vector<double>& x, const Shape& s, const std::vector<int>& axes, OpKind k) {
  const int r = int(s.size());
  std::vector<bool> red(size_t(r), false);
  for (int a : axes) red[size_t(a)] = true;
  int64_t nOut = 1;
  for (int d = 0; d < r; ++d)
    if (!red[size_t(d)]) nOut *= s[size_t(d)];
  std::vector<std::vector<double>> groups(static_cast<size_t>(nOut));
  for (size_t e = 0; e < x.size(); ++e) {
    std::vector<int64_t> idx(static_cast<size_t>(r));
    int64_t rem = int64_t(e);
    for (int d = r - 1; d >= 0; --d) {
      idx[size_t(d)] = rem % s[size_t(d)];
      rem /= s[size_t(d)];
    }
    int64_t o = 0;
    for (int d = 0; d < r; ++d)
      if (!red[size_t(d)]) o = o * s[size_t(d)] + idx[size_t(d)];
    groups[size_t(o)].push_back(x[e]);
  }
  std::vector<double> out;
  for (auto& g : groups) {
    double acc = k == OpKind::RMax ? -INFINITY : k == OpKind::RMin ? INFINITY : 0;
    for (double v : g) {
      if (k == OpKind::Sum || k == OpKind::Mean) acc += v;
      else if (std::isnan(v) || std::isnan(acc)) acc = kNaN;
      else acc = k == OpKind::RMax ? std::max(acc, v) : std::min(acc, v);
    }
    out.push_back(k == OpKind::Mean ? acc / double(g.size()) : acc);
  }
  return out;
}

COVERS(OpKind::Sum, OpKind::Mean, OpKind::RMax, OpKind::RMin);
TEST(InterpReduce, FloatAxesAndKeepdim) {
  struct AxesCase {
    std::vector<int64_t> axes;
    std::vector<int> norm;
    bool keepdim;
    Shape out;
  };
  const Shape s{3, 4, 5};
  const std::vector<AxesCase> cases = {
      {{-1}, {2}, false, {3, 4}},
      {{0, 2}, {0, 2}, true, {1, 4, 1}},
      {{-3, -1}, {0, 2}, false, {4}},
      {{1}, {1}, true, {3, 1, 5}},
      {{-1, 0, 1}, {0, 1, 2}, false, {}},
  };
  std::mt19937 rng(6);
  for (OpKind k : {OpKind::Sum, OpKind::Mean, OpKind::RMax, OpKind::RMin})
    for (const AxesCase& c : cases)
      for (DType d : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(std::string(opInfo(k).name) + " " + std::string(dtypeName(d)) + " axes " +
                     std::to_string(c.axes[0]) + (c.keepdim ? " keepdim" : ""));
        Fn f;
        HostTensor xv = randF({d, s}, rng);
        HostTensor r = f.run1(f.b.reduce(k, f.in("x", xv), c.axes, c.keepdim));
        EXPECT_EQ(r.type.shape, c.out);
        std::vector<double> want = refReduce(toDouble(xv.f), s, c.norm, k);
        if (d == DType::f32) {
          expectNear(r, want);
        } else {
          // Accumulated exactly, rounded once: exactly the rounded reference.
          for (double& w : want) w = refRound(w, d);
          expectNear(r, want, 0);
        }
      }
}

TEST(InterpReduce, RoundOnceFromDouble) {
  // bf16 1 + 2^-8 + 2^-8 = 1 + 2^-7 exactly; adding in bf16 step by step would stay at 1.
  Fn f;
  Value* x = f.in("x", ftensor({DType::bf16, {1, 3}}, {1.0f, 0x1p-8f, 0x1p-8f}));
  auto r = f.run({f.b.reduce(OpKind::Sum, x, {1}), f.b.reduce(OpKind::Mean, x, {-1}, true)});
  EXPECT_EQ(r[0].f[0], 1.0078125f);
  EXPECT_EQ(r[1].f[0], float(refBF16().round((1.0 + 0x1p-7) / 3)));
}

TEST(InterpReduce, MaxMinPropagateNaN) {
  Fn f;
  Value* x = f.in("x", ftensor({DType::f32, {2, 3}}, {1, kNaNf, 3, 4, 5, -6}));
  auto r = f.run({f.b.reduce(OpKind::RMax, x, {1}), f.b.reduce(OpKind::RMin, x, {-1}), f.b.reduce(OpKind::RMax, x, {0})});
  EXPECT_TRUE(std::isnan(r[0].f[0]));
  EXPECT_EQ(r[0].f[1], 5.0f);
  EXPECT_TRUE(std::isnan(r[1].f[0]));
  EXPECT_EQ(r[1].f[1], -6.0f);
  EXPECT_EQ(r[2].f[0], 4.0f);
  EXPECT_TRUE(std::isnan(r[2].f[1]));
}

TEST(InterpReduce, Int) {
  std::mt19937 rng(8);
  Fn f;
  HostTensor xv = randI({DType::i64, {3, 4, 5}}, rng);
  Value* x = f.in("x", xv);
  HostTensor wv = itensor({DType::i32, {2, 3}}, {1 << 30, 1 << 30, 1 << 30, 1, 2, 3});
  Value* w = f.in("w", wv);
  auto r = f.run({f.b.reduce(OpKind::Sum, x, {-2}), f.b.reduce(OpKind::RMax, x, {0, 2}, true),
                  f.b.reduce(OpKind::RMin, x, {-1}), f.b.reduce(OpKind::Sum, w, {1})});
  std::vector<double> xd(xv.i.begin(), xv.i.end());
  auto check = [](const HostTensor& got, const std::vector<double>& want) {
    ASSERT_EQ(got.i.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(got.i[k], int64_t(want[k])) << k;
  };
  check(r[0], refReduce(xd, {3, 4, 5}, {1}, OpKind::Sum));
  check(r[1], refReduce(xd, {3, 4, 5}, {0, 2}, OpKind::RMax));
  EXPECT_EQ(r[1].type.shape, (Shape{1, 4, 1}));
  check(r[2], refReduce(xd, {3, 4, 5}, {2}, OpKind::RMin));
  EXPECT_EQ(r[3].i, (std::vector<int64_t>{wrap32Ref(3LL << 30), 6}));  // i32 sum wraps
}

// ---------------------------------------------------------------------------------------
// Layout

COVERS(OpKind::Reshape, OpKind::Permute);
TEST(InterpLayout, ReshapeAndPermute) {
  std::mt19937 rng(9);
  Fn f;
  HostTensor xv = randF({DType::f32, {2, 3, 5}}, rng), iv = randI({DType::i64, {2, 3, 2}}, rng);
  Value* x = f.in("x", xv);
  Value* xi = f.in("i", iv);
  auto r = f.run({f.b.reshape(x, {5, 6}), f.b.reshape(xi, {12}), f.b.permute(x, {2, 0, 1}), f.b.permute(xi, {1, 2, 0}),
                  f.b.reshape(f.b.reshape(f.b.slice(f.b.reshape(x, {30}), 0, 7, 8), {1, 1}), {})});
  EXPECT_EQ(r[0].type.shape, (Shape{5, 6}));
  EXPECT_EQ(r[0].f, xv.f);
  EXPECT_EQ(r[1].i, iv.i);
  EXPECT_EQ(r[2].type.shape, (Shape{5, 2, 3}));
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 3; ++k) EXPECT_EQ(r[2].f[size_t((i * 2 + j) * 3 + k)], xv.f[size_t((j * 3 + k) * 5 + i)]);
  EXPECT_EQ(r[3].type.shape, (Shape{3, 2, 2}));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 2; ++k) EXPECT_EQ(r[3].i[size_t((i * 2 + j) * 2 + k)], iv.i[size_t((k * 3 + i) * 2 + j)]);
}

COVERS(OpKind::Broadcast);
TEST(InterpLayout, Broadcast) {
  std::mt19937 rng(10);
  Fn f;
  HostTensor xv = randF({DType::f32, {3, 1}}, rng), sv = randF({DType::bf16, {}}, rng), vv = randI({DType::i32, {5}}, rng);
  HostTensor bv = randBool({DType::boolean, {1, 3}}, rng);
  auto r = f.run({f.b.broadcast(f.in("x", xv), {2, 3, 7}), f.b.broadcast(f.in("s", sv), {4}),
                  f.b.broadcast(f.in("v", vv), {3, 5}), f.b.broadcast(f.in("b", bv), {2, 3})});
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 7; ++c) EXPECT_EQ(r[0].f[size_t((a * 3 + b) * 7 + c)], xv.f[size_t(b)]);
  EXPECT_EQ(r[1].f, std::vector<float>(4, sv.f[0]));
  for (int a = 0; a < 3; ++a)
    for (int c = 0; c < 5; ++c) EXPECT_EQ(r[2].i[size_t(a * 5 + c)], vv.i[size_t(c)]);
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(r[3].i[size_t(a * 3 + c)], bv.i[size_t(c)]);
}

COVERS(OpKind::Slice);
TEST(InterpLayout, Slice) {
  std::mt19937 rng(11);
  Fn f;
  HostTensor xv = randF({DType::f32, {7, 5}}, rng), iv = randI({DType::i64, {7}}, rng);
  Value* x = f.in("x", xv);
  auto r = f.run({f.b.slice(x, 0, 1, 7, 2), f.b.slice(x, -1, 2, 5), f.b.slice(f.in("i", iv), 0, 0, 7, 3),
                  f.b.slice(x, 1, 4, 5, 4)});
  EXPECT_EQ(r[0].type.shape, (Shape{3, 5}));
  for (int a = 0; a < 3; ++a)
    for (int c = 0; c < 5; ++c) EXPECT_EQ(r[0].f[size_t(a * 5 + c)], xv.f[size_t((1 + 2 * a) * 5 + c)]);
  EXPECT_EQ(r[1].type.shape, (Shape{7, 3}));
  for (int a = 0; a < 7; ++a)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(r[1].f[size_t(a * 3 + c)], xv.f[size_t(a * 5 + 2 + c)]);
  EXPECT_EQ(r[2].i, (std::vector<int64_t>{iv.i[0], iv.i[3], iv.i[6]}));
  EXPECT_EQ(r[3].type.shape, (Shape{7, 1}));
  for (int a = 0; a < 7; ++a) EXPECT_EQ(r[3].f[size_t(a)], xv.f[size_t(a * 5 + 4)]);
}

COVERS(OpKind::Concat);
TEST(InterpLayout, Concat) {
  std::mt19937 rng(12);
  Fn f;
  HostTensor a = randF({DType::f32, {2, 3}}, rng), b = randF({DType::f32, {2, 1}}, rng), c = randF({DType::f32, {2, 4}}, rng);
  HostTensor p = randI({DType::i32, {1, 3}}, rng), q = randI({DType::i32, {3, 3}}, rng);
  auto r = f.run({f.b.concat({f.in("a", a), f.in("b", b), f.in("c", c)}, -1), f.b.concat({f.in("p", p), f.in("q", q)}, 0)});
  EXPECT_EQ(r[0].type.shape, (Shape{2, 8}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 8; ++j) {
      float want = j < 3 ? a.f[size_t(i * 3 + j)] : j < 4 ? b.f[size_t(i)] : c.f[size_t(i * 4 + j - 4)];
      EXPECT_EQ(r[0].f[size_t(i * 8 + j)], want) << i << "," << j;
    }
  std::vector<int64_t> want = p.i;
  want.insert(want.end(), q.i.begin(), q.i.end());
  EXPECT_EQ(r[1].i, want);
}

COVERS(OpKind::Gather);
TEST(InterpLayout, Gather) {
  std::mt19937 rng(13);
  Fn f;
  HostTensor xv = randF({DType::f32, {4, 5}}, rng);
  HostTensor i1 = randIndex({DType::i64, {4, 3}}, rng, 5), i0 = randIndex({DType::i32, {6, 5}}, rng, 4);
  HostTensor yv = randI({DType::i64, {2, 3, 4}}, rng), i2 = randIndex({DType::i64, {2, 3, 7}}, rng, 4);
  Value* x = f.in("x", xv);
  auto r = f.run({f.b.gather(x, f.in("i1", i1), 1), f.b.gather(x, f.in("i0", i0), 0),
                  f.b.gather(f.in("y", yv), f.in("i2", i2), -1)});
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(r[0].f[size_t(i * 3 + j)], xv.f[size_t(i * 5 + i1.i[size_t(i * 3 + j)])]);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 5; ++j) EXPECT_EQ(r[1].f[size_t(i * 5 + j)], xv.f[size_t(i0.i[size_t(i * 5 + j)] * 5 + j)]);
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 7; ++c) {
        size_t k = size_t((a * 3 + b) * 7 + c);
        EXPECT_EQ(r[2].i[k], yv.i[size_t((a * 3 + b) * 4 + i2.i[k])]);
      }
}

TEST(InterpErrors, GatherOutOfRange) {
  for (int64_t bad : {12, 10, -1}) {
    Fn f;
    Value* x = f.in("x", ftensor({DType::f32, {10}}, std::vector<float>(10, 1.0f)));
    f.b.output(f.b.gather(x, f.in("i", itensor({DType::i64, {3}}, {0, bad, 1})), 0));
    EXPECT_EQ(errorOf([&] { interpret(f.g, f.env); }),
              "gather index " + std::to_string(bad) + " out of range [0, 10)");
  }
}

COVERS(OpKind::ScatterAdd);
TEST(InterpLayout, ScatterAdd) {
  std::mt19937 rng(14);
  Fn f;
  HostTensor base0 = randF({DType::f32, {5, 3}}, rng), idx0 = randIndex({DType::i64, {7, 3}}, rng, 5),
             src0 = randF({DType::f32, {7, 3}}, rng);
  HostTensor base1 = randI({DType::i64, {3, 4}}, rng), idx1 = randIndex({DType::i32, {3, 6}}, rng, 4),
             src1 = randI({DType::i64, {3, 6}}, rng);
  HostTensor base2 = ftensor({DType::bf16, {2}}, {1.0f, 2.0f}), idx2 = itensor({DType::i64, {2}}, {0, 0}),
             src2 = ftensor({DType::bf16, {2}}, {0x1p-8f, 0x1p-8f});
  auto r = f.run({f.b.scatterAdd(f.in("b0", base0), f.in("i0", idx0), f.in("s0", src0), 0),
                  f.b.scatterAdd(f.in("b1", base1), f.in("i1", idx1), f.in("s1", src1), -1),
                  f.b.scatterAdd(f.in("b2", base2), f.in("i2", idx2), f.in("s2", src2), 0)});
  std::vector<double> want0 = toDouble(base0.f);
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 3; ++j) want0[size_t(idx0.i[size_t(i * 3 + j)] * 3 + j)] += src0.f[size_t(i * 3 + j)];
  expectNear(r[0], want0);
  std::vector<int64_t> want1 = base1.i;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 6; ++j) want1[size_t(i * 4 + idx1.i[size_t(i * 6 + j)])] += src1.i[size_t(i * 6 + j)];
  EXPECT_EQ(r[1].i, want1);
  EXPECT_EQ(r[2].f, (std::vector<float>{1.0078125f, 2.0f}));  // accumulated in double, rounded once
}

TEST(InterpErrors, ScatterAddOutOfRange) {
  for (int64_t bad : {5, -2}) {
    Fn f;
    Value* base = f.in("b", ftensor({DType::f32, {5}}, std::vector<float>(5, 1.0f)));
    Value* idx = f.in("i", itensor({DType::i64, {2}}, {bad, 0}));
    Value* src = f.in("s", ftensor({DType::f32, {2}}, {1.0f, 1.0f}));
    f.b.output(f.b.scatterAdd(base, idx, src, 0));
    EXPECT_EQ(errorOf([&] { interpret(f.g, f.env); }),
              "scatter_add index " + std::to_string(bad) + " out of range [0, 5)");
  }
}

// ---------------------------------------------------------------------------------------
// Matmul

// Logical [batch, R, C] values stored as [.., C, R] when `transposed`.
HostTensor stored(const std::vector<float>& logical, Shape batch, int64_t R, int64_t C, bool transposed, DType d) {
  std::vector<float> v(logical.size());
  int64_t nb = 1;
  for (int64_t s : batch) nb *= s;
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j)
        v[size_t(b * R * C + (transposed ? j * R + i : i * C + j))] = logical[size_t(b * R * C + i * C + j)];
  Shape s = batch;
  s.push_back(transposed ? C : R);
  s.push_back(transposed ? R : C);
  return ftensor({d, s}, v);
}

// Large enough for the machine's BLAS where there is one (ir/cpu_blas.h: dgemm in blocks,
// over more than one block of rows and of columns here), else for the threaded loop: either
// way each element is its double sum rounded once to f32, within one f32 rounding of the
// reference, transposed operands included.
TEST(InterpMatmul, LargeGemmsAreTheDoubleSumRoundedOnce) {
  const int64_t M = 600, K = 96, N = 4200;  // M * N * K above the threaded threshold; 2 x 2 BLAS blocks
  std::mt19937 rng(23);
  for (bool ta : {false, true}) {
    SCOPED_TRACE(std::string("ta=") + (ta ? "1" : "0") + (cpuBlasName().empty() ? " (no BLAS)" : " via " + cpuBlasName()));
    std::vector<float> A = randVals(size_t(M * K), rng), B = randVals(size_t(K * N), rng);
    Fn f;
    HostTensor r = f.run1(f.b.matmul(f.in("a", stored(A, {}, M, K, ta, DType::f32)), f.in("b", stored(B, {}, K, N, false, DType::f32)), ta,
                                     false));
    std::vector<double> ref(size_t(M * N), 0.0);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k) {
        const double a = A[size_t(i * K + k)];
        for (int64_t j = 0; j < N; ++j) ref[size_t(i * N + j)] += a * double(B[size_t(k * N + j)]);
      }
    int64_t off = 0;
    for (size_t k = 0; k < ref.size(); ++k)
      if (r.f[k] != float(ref[k])) {
        ++off;
        EXPECT_LE(std::abs(double(r.f[k]) - ref[k]), std::abs(ref[k]) * 1.2e-7 + 1e-30) << "element " << k;
      }
    EXPECT_LT(off, int64_t(ref.size() / 1000)) << "sums in another order may round differently, but rarely";
  }
}

// interpreterCost, against what interpret holds: x and w (1 KB each) stay live to their last
// reader; the matmul's 2 * 16 * 16 * 16 FLOPs; the peak while h and y are both held.
TEST(InterpCost, PeakBytesAndGemmFlopsOfAGraph) {
  Fn f;
  Value* x = f.in("x", ftensor({DType::f32, {16, 16}}, std::vector<float>(256, 1.0f)));
  Value* w = f.in("w", ftensor({DType::f32, {16, 16}}, std::vector<float>(256, 0.5f)));
  Value* h = f.b.matmul(x, w);
  Value* y = f.b.binary(OpKind::Add, h, h);
  f.b.output(y);
  const InterpreterCost c = interpreterCost(f.g);
  EXPECT_EQ(c.gemmFlops, 2 * 16 * 16 * 16);
  EXPECT_EQ(c.valueBytes, 4 * 1024);
  EXPECT_EQ(c.peakBytes, 3 * 1024) << "x, w and h at the matmul; h and y at the add";
}

COVERS(OpKind::Matmul);
TEST(InterpMatmul, TransposesAndBatches) {
  struct Case {
    Shape batchA, batchB;
    bool ta, tb;
    DType d;
  };
  const int64_t M = 3, K = 4, N = 5;
  const std::vector<Case> cases = {
      {{}, {}, false, false, DType::f32}, {{}, {}, true, false, DType::f32},  {{}, {}, false, true, DType::f32},
      {{}, {}, true, true, DType::f32},   {{2}, {}, false, false, DType::f32}, {{}, {2}, true, false, DType::f32},
      {{2}, {2}, true, true, DType::f32}, {{2, 2}, {}, false, true, DType::f32}, {{3}, {3}, false, false, DType::bf16},
  };
  std::mt19937 rng(15);
  for (const Case& c : cases) {
    SCOPED_TRACE("ta=" + std::to_string(c.ta) + " tb=" + std::to_string(c.tb) + " batchA rank " +
                 std::to_string(c.batchA.size()) + " batchB rank " + std::to_string(c.batchB.size()));
    int64_t na = 1, nbt = 1;
    for (int64_t s : c.batchA) na *= s;
    for (int64_t s : c.batchB) nbt *= s;
    // Round the logical values first so the reference sees what the interpreter sees.
    std::vector<float> A = randVals(size_t(na * M * K), rng), B = randVals(size_t(nbt * K * N), rng);
    for (float& v : A) v = float(refRound(v, c.d));
    for (float& v : B) v = float(refRound(v, c.d));
    Fn f;
    HostTensor r = f.run1(f.b.matmul(f.in("a", stored(A, c.batchA, M, K, c.ta, c.d)),
                                     f.in("b", stored(B, c.batchB, K, N, c.tb, c.d)), c.ta, c.tb));
    Shape batch = c.batchA.empty() ? c.batchB : c.batchA;
    Shape want = batch;
    want.push_back(M);
    want.push_back(N);
    ASSERT_EQ(r.type.shape, want);
    int64_t nb = std::max(na, nbt);
    std::vector<double> ref;
    for (int64_t s = 0; s < nb; ++s)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double acc = 0;
          for (int64_t k = 0; k < K; ++k)
            acc += double(A[size_t((na > 1 ? s : 0) * M * K + i * K + k)]) * B[size_t((nbt > 1 ? s : 0) * K * N + k * N + j)];
          ref.push_back(acc);
        }
    if (c.d == DType::f32) {
      expectNear(r, ref);
    } else {
      for (double& v : ref) v = refRound(v, c.d);  // double accumulation, one rounding
      expectNear(r, ref, 0);
    }
  }
}

// ---------------------------------------------------------------------------------------
// Composites

COVERS(OpKind::Softmax, OpKind::LogSoftmax);
TEST(InterpComposite, SoftmaxAndLogSoftmax) {
  std::mt19937 rng(16);
  const Shape s{3, 4, 5};
  for (int64_t axis : {1, -1, 0}) {
    for (OpKind k : {OpKind::Softmax, OpKind::LogSoftmax}) {
      SCOPED_TRACE(std::string(opInfo(k).name) + " axis " + std::to_string(axis));
      Fn f;
      HostTensor xv = randF({DType::f32, s}, rng);
      HostTensor r = f.run1(f.b.create1(k, {f.in("x", xv)}, {{"axis", axis}}));
      const int ax = int(axis < 0 ? axis + 3 : axis);
      std::vector<double> want(xv.f.size());
      int64_t st[3] = {20, 5, 1};
      for (int64_t e = 0; e < 60; ++e) {
        int64_t pos = (e / st[ax]) % s[size_t(ax)], rowStart = e - pos * st[ax];
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < s[size_t(ax)]; ++j) m = std::max(m, double(xv.f[size_t(rowStart + j * st[ax])]));
        for (int64_t j = 0; j < s[size_t(ax)]; ++j) sum += std::exp(double(xv.f[size_t(rowStart + j * st[ax])]) - m);
        double xe = xv.f[size_t(e)];
        want[size_t(e)] = k == OpKind::Softmax ? std::exp(xe - m) / sum : xe - m - std::log(sum);
      }
      expectNear(r, want);
    }
  }
}

COVERS(OpKind::Silu);
TEST(InterpComposite, Silu) {
  std::mt19937 rng(17);
  for (DType d : {DType::f32, DType::bf16}) {
    Fn f;
    HostTensor xv = randF({d, {3, 7}}, rng);
    HostTensor r = f.run1(f.b.create1(OpKind::Silu, {f.in("x", xv)}));
    std::vector<double> want;
    for (float a : xv.f) want.push_back(a / (1 + std::exp(-double(a))));
    if (d == DType::f32) expectNear(r, want);
    else expectLowPrecision(r, want);
  }
}

COVERS(OpKind::Uniform);
TEST(InterpPointwise, UniformIsAPureFunctionOfItsOperands) {
  // Counters 0..n-1 under one key and stream: the numbers lie in [0, 1), spread evenly (mean
  // 1/2, a tenth below 0.1), are not a function of the counter alone (another key or stream
  // changes them) and repeat exactly for the same three operands.
  const int64_t n = 20000;
  std::vector<int64_t> counter(n);
  for (int64_t k = 0; k < n; ++k) counter[size_t(k)] = k;
  auto draw = [&](int64_t key, int64_t stream) {
    Fn f;
    Value* c = f.in("c", itensor({DType::i64, {n}}, counter));
    Value* k = f.in("k", itensor({DType::i64, {n}}, std::vector<int64_t>(size_t(n), key)));
    Value* s = f.in("s", itensor({DType::i64, {n}}, std::vector<int64_t>(size_t(n), stream)));
    return f.run1(f.b.create1(OpKind::Uniform, {c, k, s}));
  };
  const HostTensor a = draw(42, 0), again = draw(42, 0), otherKey = draw(43, 0), otherStream = draw(42, 1);
  EXPECT_EQ(a.type, (Type{DType::f32, {n}}));
  double sum = 0;
  int64_t below = 0, sameKey = 0, sameStream = 0;
  for (size_t k = 0; k < size_t(n); ++k) {
    ASSERT_GE(a.f[k], 0.0f);
    ASSERT_LT(a.f[k], 1.0f);
    sum += a.f[k];
    below += a.f[k] < 0.1f;
    sameKey += a.f[k] == otherKey.f[k];
    sameStream += a.f[k] == otherStream.f[k];
  }
  EXPECT_EQ(a.f, again.f);
  EXPECT_NEAR(sum / double(n), 0.5, 0.01);
  EXPECT_NEAR(double(below) / double(n), 0.1, 0.01);
  EXPECT_LT(sameKey, 10);
  EXPECT_LT(sameStream, 10);
  Fn f;
  Value* x = f.in("x", ftensor({DType::f32, {2}}, {1, 2}));
  EXPECT_EQ(errorOf([&] { f.b.create1(OpKind::Uniform, {x, x, x}); }), "uniform takes i64 operands, got f32[2]");
}

COVERS(OpKind::Dropout);
TEST(InterpComposite, DropoutKeepsAndScalesByItsMask) {
  // Of 6,000 elements at p = 0.25: about a quarter are exactly zero, the rest x / 0.75 (in
  // the dtype); the same key and stream give the same mask, another stream another one.
  std::mt19937 rng(21);
  for (DType d : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtypeName(d));
    Fn f;
    HostTensor xv = randF({d, {3, 2000}}, rng, /*positive=*/true);
    Value* x = f.in("x", xv);
    Value* key = f.in("key", itensor({DType::i64, {}}, {7}));
    auto drop = [&](int64_t stream) {
      return f.b.create1(OpKind::Dropout, {x, key}, {{"p", 0.25}, {"stream", stream}});
    };
    auto r = f.run({drop(0), drop(0), drop(1)});
    const float scale = roundDouble(1 / 0.75, d);
    int64_t dropped = 0, differ = 0;
    for (size_t k = 0; k < xv.f.size(); ++k) {
      if (r[0].f[k] == 0) ++dropped;
      else ASSERT_EQ(r[0].f[k], roundToDType(xv.f[k] * scale, d)) << k;
      ASSERT_EQ(r[0].f[k], r[1].f[k]) << k;
      differ += (r[0].f[k] == 0) != (r[2].f[k] == 0);
    }
    EXPECT_NEAR(double(dropped) / double(xv.f.size()), 0.25, 0.02);
    EXPECT_GT(differ, 1000);
  }
  Fn f;
  Value* x = f.in("x", ftensor({DType::f32, {2}}, {1, 2}));
  Value* key = f.in("key", itensor({DType::i64, {}}, {7}));
  EXPECT_EQ(errorOf([&] { f.b.create1(OpKind::Dropout, {x, key}, {{"p", 1.0}}); }), "dropout p must lie in [0, 1), got 1");
  EXPECT_EQ(errorOf([&] { f.b.create1(OpKind::Dropout, {x, x}, {{"p", 0.5}}); }), "dropout key must be i64[], got f32[2]");
}

COVERS(OpKind::Gelu);
TEST(InterpComposite, Gelu) {
  std::mt19937 rng(20);
  const double pi = 3.14159265358979323846;
  for (const char* approx : {"none", "tanh"})
    for (DType d : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(approx) + " " + std::string(dtypeName(d)));
      Fn f;
      HostTensor xv = randF({d, {3, 7}}, rng);
      HostTensor r = f.run1(f.b.create1(OpKind::Gelu, {f.in("x", xv)}, {{"approximate", std::string(approx)}}));
      std::vector<double> want;
      for (float fa : xv.f) {
        double a = fa;
        want.push_back(std::string(approx) == "none"
                           ? 0.5 * a * (1 + std::erf(a / std::sqrt(2.0)))
                           : 0.5 * a * (1 + std::tanh(std::sqrt(2 / pi) * (a + 0.044715 * a * a * a))));
      }
      if (d == DType::f32) expectNear(r, want, 1e-6, 1e-7);  // erf/tanh of f32 arguments
      else expectLowPrecision(r, want);
    }
  Fn f;
  Value* x = f.in("x", randF({DType::f32, {2}}, rng));
  EXPECT_EQ(errorOf([&] { f.b.create1(OpKind::Gelu, {x}, {{"approximate", std::string("fast")}}); }),
            "gelu approximate must be \"none\" or \"tanh\", got \"fast\"");
}

COVERS(OpKind::LayerNorm);
TEST(InterpComposite, LayerNorm) {
  std::mt19937 rng(21);
  for (const Shape& s : {Shape{2, 3, 7}, Shape{5}}) {
    SCOPED_TRACE(shapeStr(s));
    const int64_t D = s.back(), rows = Type{DType::f32, s}.numel() / D;
    Fn f;
    HostTensor xv = randF({DType::f32, s}, rng), wv = randF({DType::f32, {D}}, rng), bv = randF({DType::f32, {D}}, rng);
    const double eps = 1e-3;
    HostTensor r = f.run1(
        f.b.create1(OpKind::LayerNorm, {f.in("x", xv), f.in("w", wv), f.in("b", bv)}, {{"eps", eps}}));
    std::vector<double> want;
    for (int64_t row = 0; row < rows; ++row) {
      auto at = [&](int64_t j) { return double(xv.f[size_t(row * D + j)]); };
      double mu = 0, var = 0;
      for (int64_t j = 0; j < D; ++j) mu += at(j) / double(D);
      for (int64_t j = 0; j < D; ++j) var += (at(j) - mu) * (at(j) - mu) / double(D);
      for (int64_t j = 0; j < D; ++j)
        want.push_back((at(j) - mu) / std::sqrt(var + eps) * wv.f[size_t(j)] + bv.f[size_t(j)]);
    }
    expectNear(r, want, 1e-6, 1e-7);
  }
  Fn f;
  Value* x = f.in("x", randF({DType::f32, {2, 4}}, rng));
  Value* w = f.in("w", randF({DType::f32, {4}}, rng));
  Value* bad = f.in("b", randF({DType::f32, {3}}, rng));
  EXPECT_EQ(errorOf([&] { f.b.create1(OpKind::LayerNorm, {x, w, bad}); }), "layernorm bias must be f32[4], got f32[3]");
}

COVERS(OpKind::RMSNorm);
TEST(InterpComposite, RMSNorm) {
  std::mt19937 rng(18);
  const int64_t D = 8;
  Fn f;
  HostTensor xv = randF({DType::f32, {2, 3, D}}, rng), gv = randF({DType::f32, {D}}, rng);
  const double eps = 1e-3;
  HostTensor r = f.run1(f.b.create1(OpKind::RMSNorm, {f.in("x", xv), f.in("g", gv)}, {{"eps", eps}}));
  std::vector<double> want;
  for (int64_t row = 0; row < 6; ++row) {
    double ms = 0;
    for (int64_t j = 0; j < D; ++j) ms += double(xv.f[size_t(row * D + j)]) * xv.f[size_t(row * D + j)];
    ms /= double(D);
    for (int64_t j = 0; j < D; ++j) want.push_back(xv.f[size_t(row * D + j)] / std::sqrt(ms + eps) * gv.f[size_t(j)]);
  }
  expectNear(r, want);
}

COVERS(OpKind::Rope);
TEST(InterpComposite, Rope) {
  std::mt19937 rng(19);
  const int64_t B = 2, T = 3, D = 8;
  for (double theta : {10000.0, 100.0}) {
    Fn f;
    HostTensor xv = randF({DType::f32, {B, T, D}}, rng), pv = itensor({DType::i64, {T}}, {0, 1, 3});
    HostTensor r = f.run1(f.b.create1(OpKind::Rope, {f.in("x", xv), f.in("pos", pv)}, {{"theta", theta}}));
    std::vector<double> want(xv.f.size());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < D / 2; ++i) {
          double ang = double(pv.i[size_t(t)]) * std::pow(theta, -2.0 * double(i) / double(D));
          size_t k = size_t((b * T + t) * D + 2 * i);
          double x0 = xv.f[k], x1 = xv.f[k + 1];
          want[k] = x0 * std::cos(ang) - x1 * std::sin(ang);
          want[k + 1] = x0 * std::sin(ang) + x1 * std::cos(ang);
        }
    // The rotation angle is computed in f32 (a few 1e-7 absolute), hence the absolute term.
    expectNear(r, want, 1e-6, 3e-6);
  }
}

COVERS(OpKind::CrossEntropy);
TEST(InterpComposite, CrossEntropy) {
  std::mt19937 rng(20);
  const int64_t V = 7;
  Fn f;
  HostTensor lv = randF({DType::f32, {2, 3, V}}, rng), tv = randIndex({DType::i32, {2, 3}}, rng, V);
  HostTensor r = f.run1(f.b.create1(OpKind::CrossEntropy, {f.in("logits", lv), f.in("t", tv)}));
  EXPECT_EQ(r.type.shape, Shape{});
  double total = 0;
  for (int64_t row = 0; row < 6; ++row) {
    double m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < V; ++j) m = std::max(m, double(lv.f[size_t(row * V + j)]));
    for (int64_t j = 0; j < V; ++j) sum += std::exp(lv.f[size_t(row * V + j)] - m);
    total += m + std::log(sum) - lv.f[size_t(row * V + tv.i[size_t(row)])];
  }
  expectNear(r, {total / 6});
}

TEST(InterpErrors, CrossEntropyTargetOutOfRange) {
  Fn f;
  Value* l = f.in("l", ftensor({DType::f32, {2, 7}}, std::vector<float>(14, 1.0f)));
  f.b.output(f.b.create1(OpKind::CrossEntropy, {l, f.in("t", itensor({DType::i64, {2}}, {3, 7}))}));
  EXPECT_EQ(errorOf([&] { interpret(f.g, f.env); }), "cross_entropy target index 7 out of range [0, 7)");
}

// attention_backward at (o, lse) of the forward: its dq, dk, dv are the gradients of
// sum(attention(q, k, v) * do), checked by central differences; lse is log sum exp of the
// scaled, masked scores.
COVERS(OpKind::AttentionBackward);
TEST(InterpComposite, AttentionBackwardIsTheGradient) {
  std::mt19937 rng(23);
  const Type t{DType::f32, {2, 5, 4}};
  HostTensor qv = randF(t, rng), kv = randF(t, rng), vv = randF(t, rng), gv = randF(t, rng);
  auto forward = [&](const HostTensor& q, const HostTensor& k, const HostTensor& v) {
    Fn f;
    std::vector<Value*> o = f.b.create(OpKind::Attention, {f.in("q", q), f.in("k", k), f.in("v", v)},
                                       {{"causal", true}, {"scale", 0.6}});
    f.b.output(o[0]);
    f.b.output(o[1]);
    return interpret(f.g, f.env);
  };
  std::vector<HostTensor> fwd = forward(qv, kv, vv);
  // lse of row (0, 2): keys 0..2 visible.
  double m = -INFINITY, s = 0, dots[3];
  for (int j = 0; j < 3; ++j) {
    dots[j] = 0;
    for (int c = 0; c < 4; ++c) dots[j] += double(qv.f[size_t(2 * 4 + c)]) * kv.f[size_t(j * 4 + c)] * 0.6;
    m = std::max(m, dots[j]);
  }
  for (double x : dots) s += std::exp(x - m);
  EXPECT_NEAR(fwd[1].f[2], m + std::log(s), 1e-5);
  Fn f;
  std::vector<Value*> d = f.b.create(OpKind::AttentionBackward,
                                     {f.in("q", qv), f.in("k", kv), f.in("v", vv), f.in("o", fwd[0]), f.in("do", gv),
                                      f.in("lse", fwd[1])},
                                     {{"causal", true}, {"scale", 0.6}});
  for (Value* x : d) f.b.output(x);
  std::vector<HostTensor> grads = interpret(f.g, f.env);
  auto loss = [&](const HostTensor& q, const HostTensor& k, const HostTensor& v) {
    HostTensor o = forward(q, k, v)[0];
    double l = 0;
    for (size_t i = 0; i < o.size(); ++i) l += double(o.f[i]) * gv.f[i];
    return l;
  };
  for (int which = 0; which < 3; ++which)
    for (size_t e : {size_t(0), size_t(13), size_t(39)}) {
      HostTensor p[3] = {qv, kv, vv}, m2[3] = {qv, kv, vv};
      const float h = 1e-2f;
      p[which].f[e] += h;
      m2[which].f[e] -= h;
      const double fd = (loss(p[0], p[1], p[2]) - loss(m2[0], m2[1], m2[2])) / (2 * double(h));
      EXPECT_NEAR(grads[size_t(which)].f[e], fd, 2e-3) << "gradient " << which << " element " << e;
    }
}

// Grouped-query attention is attention over k and v with each head repeated for its group
// (query head h reads kv head h / group), and its backward's dk, dv are the repeated ones'
// summed over each group.
TEST(InterpComposite, GroupedQueryAttentionIsRepeatedHeads) {
  std::mt19937 rng(31);
  const int64_t B = 2, H = 6, Hkv = 2, T = 5, d = 4, g = H / Hkv;
  const Type tq{DType::f32, {B, H, T, d}}, tkv{DType::f32, {B, Hkv, T, d}};
  HostTensor q = randF(tq, rng), k = randF(tkv, rng), v = randF(tkv, rng), dO = randF(tq, rng);
  auto repeat = [&](const HostTensor& x) {
    HostTensor r = HostTensor::zeros(tq);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t e = 0; e < T * d; ++e) r.f[size_t((b * H + h) * T * d + e)] = x.f[size_t((b * Hkv + h / g) * T * d + e)];
    return r;
  };
  auto run = [&](const HostTensor& kk, const HostTensor& vv) {
    Fn f;
    Value* qi = f.in("q", q);
    Value* ki = f.in("k", kk);
    Value* vi = f.in("v", vv);
    const NamedAttrs at = {{"causal", true}, {"scale", 0.5}};
    std::vector<Value*> o = f.b.create(OpKind::Attention, {qi, ki, vi}, at);
    std::vector<Value*> grads = f.b.create(OpKind::AttentionBackward, {qi, ki, vi, o[0], f.in("do", dO), o[1]}, at);
    f.b.output(o[0]);
    for (Value* x : grads) f.b.output(x);
    return interpret(f.g, f.env);
  };
  const std::vector<HostTensor> grouped = run(k, v), repeated = run(repeat(k), repeat(v));
  expectNear(grouped[0], std::vector<double>(repeated[0].f.begin(), repeated[0].f.end()));  // o
  expectNear(grouped[1], std::vector<double>(repeated[1].f.begin(), repeated[1].f.end()));  // dq
  for (int r : {2, 3}) {                  // dk, dv: the group's sum
    std::vector<double> want(size_t(B * Hkv * T * d), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t e = 0; e < T * d; ++e)
          want[size_t((b * Hkv + h / g) * T * d + e)] += repeated[size_t(r)].f[size_t((b * H + h) * T * d + e)];
    expectNear(grouped[size_t(r)], want, 1e-5, 1e-7);  // the sum of rounded per-head terms against one rounding
  }
}

COVERS(OpKind::Attention);
TEST(InterpComposite, Attention) {
  struct Case {
    Shape batch;
    int64_t Tq, Tk, d, dv;
    bool causal;
  };
  const std::vector<Case> cases = {
      {{2}, 3, 5, 4, 6, true}, {{2}, 3, 5, 4, 6, false}, {{2, 2}, 4, 4, 3, 2, true}, {{}, 1, 3, 2, 2, true},
  };
  std::mt19937 rng(21);
  for (const Case& c : cases) {
    SCOPED_TRACE("Tq=" + std::to_string(c.Tq) + " Tk=" + std::to_string(c.Tk) + (c.causal ? " causal" : ""));
    auto shape = [&](int64_t a, int64_t b) {
      Shape s = c.batch;
      s.push_back(a);
      s.push_back(b);
      return s;
    };
    int64_t nb = 1;
    for (int64_t s : c.batch) nb *= s;
    Fn f;
    HostTensor q = randF({DType::f32, shape(c.Tq, c.d)}, rng), k = randF({DType::f32, shape(c.Tk, c.d)}, rng),
               v = randF({DType::f32, shape(c.Tk, c.dv)}, rng);
    const double scale = 0.7;
    HostTensor r = f.run1(f.b.create1(OpKind::Attention, {f.in("q", q), f.in("k", k), f.in("v", v)},
                                      {{"causal", c.causal}, {"scale", scale}}));
    std::vector<double> want;
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t i = 0; i < c.Tq; ++i) {
        std::vector<double> s(size_t(c.Tk));
        double m = -INFINITY;
        for (int64_t j = 0; j < c.Tk; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < c.d; ++e)
            dot += double(q.f[size_t((b * c.Tq + i) * c.d + e)]) * k.f[size_t((b * c.Tk + j) * c.d + e)];
          s[size_t(j)] = (c.causal && j > i + (c.Tk - c.Tq)) ? -INFINITY : dot * scale;
          m = std::max(m, s[size_t(j)]);
        }
        double den = 0;
        for (double& x : s) den += (x = std::exp(x - m));
        for (int64_t e = 0; e < c.dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < c.Tk; ++j) acc += s[size_t(j)] * v.f[size_t((b * c.Tk + j) * c.dv + e)];
          want.push_back(acc / den);
        }
      }
    expectNear(r, want);
  }
}

// ---------------------------------------------------------------------------------------
// Kernel

COVERS(OpKind::Kernel);
TEST(InterpKernel, BodyBindsOperandsPositionally) {
  std::mt19937 rng(22);
  const Type t{DType::f32, {3, 4}};
  Fn f;
  HostTensor xv = randF(t, rng), yv = randF(t, rng);
  Value* x = f.in("x", xv);
  Value* y = f.in("y", yv);
  // Body input names are arbitrary and deliberately clash with the outer ones: binding is
  // by position (operand 0 = y -> "x", operand 1 = x -> "y").
  auto body = std::make_unique<Graph>();
  body->name = "k0";
  {
    Builder kb(*body);
    Value* p = kb.input("x", t);
    Value* q = kb.input("y", t);
    Value* two = kb.constant(2.0, t);
    kb.output(kb.binary(OpKind::Sub, p, q));                                 // y - x
    kb.output(kb.binary(OpKind::Mul, kb.unary(OpKind::Exp, q), two));        // 2 exp(x)
  }
  auto ks = f.b.create(OpKind::Kernel, {y, x}, {{"name", std::string("k0")}}, {t, t}, std::move(body));
  auto r = f.run({ks[0], ks[1], f.b.binary(OpKind::Add, ks[0], ks[1])});
  std::vector<double> w0, w1, w2;
  for (size_t k = 0; k < xv.f.size(); ++k) {
    double a = double(yv.f[k]) - xv.f[k], b = 2 * std::exp(double(xv.f[k]));
    w0.push_back(a), w1.push_back(b), w2.push_back(a + b);
  }
  expectNear(r[0], w0);
  expectNear(r[1], w1);
  expectNear(r[2], w2);
}

// ---------------------------------------------------------------------------------------
// Binding errors

TEST(InterpErrors, MissingBinding) {
  Fn f;
  Value* x = f.b.input("x", {DType::f32, {2}});
  f.b.output(x);
  EXPECT_EQ(errorOf([&] { interpret(f.g, f.env); }), "missing value for input 'x'");
  Fn g;
  g.b.output(g.b.param("w", {DType::f32, {2}}));
  EXPECT_EQ(errorOf([&] { interpret(g.g, g.env); }), "missing value for param 'w'");
}

TEST(InterpErrors, MistypedBinding) {
  Fn f;
  f.b.output(f.b.input("x", {DType::f32, {3, 5}}));
  f.env["x"] = ftensor({DType::f32, {3, 4}}, std::vector<float>(12, 1.0f));
  std::string e = errorOf([&] { interpret(f.g, f.env); });
  EXPECT_NE(e.find("'x'"), std::string::npos) << e;
  EXPECT_NE(e.find("f32[3,5]"), std::string::npos) << e;
  EXPECT_NE(e.find("f32[3,4]"), std::string::npos) << e;
  f.env["x"] = itensor({DType::i64, {3, 5}}, std::vector<int64_t>(15, 1));
  e = errorOf([&] { interpret(f.g, f.env); });
  EXPECT_NE(e.find("f32[3,5]"), std::string::npos) << e;
  EXPECT_NE(e.find("i64[3,5]"), std::string::npos) << e;
  HostTensor shortData;  // right type, too few elements
  shortData.type = {DType::f32, {3, 5}};
  shortData.f.assign(3, 1.0f);
  f.env["x"] = shortData;
  EXPECT_THROW(interpret(f.g, f.env), Error);
}

// ---------------------------------------------------------------------------------------
// Collectives: ranks side by side (interpretRanks); one rank is the identity

COVERS(OpKind::AllReduce, OpKind::ReduceScatter, OpKind::AllGather, OpKind::Shard);
TEST(InterpCollectives, RanksExchangeExactly) {
  Fn f;
  Value* x = f.b.input("x", {DType::f32, {4, 2}});
  Value* h = f.b.input("h", {DType::bf16, {3}});
  std::vector<Value*> sum = f.b.create(OpKind::AllReduce, {x, h}, {{"ranks", int64_t(3)}});
  Value* mean = f.b.create1(OpKind::AllReduce, {h}, {{"ranks", int64_t(3)}, {"reduce", std::string("mean")}});
  Value* part = f.b.create1(OpKind::ReduceScatter, {f.b.slice(x, 0, 0, 3)}, {{"ranks", int64_t(3)}});
  Value* all = f.b.create1(OpKind::AllGather, {x}, {{"ranks", int64_t(3)}});
  for (Value* v : {sum[0], sum[1], mean, part, all}) f.b.output(v);
  std::vector<Bindings> ranks;
  for (int r = 0; r < 3; ++r) {
    HostTensor xv = HostTensor::zeros({DType::f32, {4, 2}}), hv = HostTensor::zeros({DType::bf16, {3}});
    for (size_t k = 0; k < 8; ++k) xv.f[k] = float(k) + 0.25f * float(r + 1);
    for (size_t k = 0; k < 3; ++k) hv.set(k, 1.0 + double(r) / 128);  // bf16 steps of 1/128 near 1
    ranks.push_back({{"x", xv}, {"h", hv}});
  }
  std::vector<std::vector<HostTensor>> out = interpretRanks(f.g, ranks);
  for (int r = 0; r < 3; ++r) {
    for (size_t k = 0; k < 8; ++k) EXPECT_EQ(out[size_t(r)][0].f[k], 3 * float(k) + 1.5f);
    // 1 + 1.0078125 + 1.015625 = 3.0234375, a tie in bf16 rounded once to even: 3.03125, not
    // the 3.015625 that rounding the partial sum 2.0078125 first would give
    for (size_t k = 0; k < 3; ++k) EXPECT_EQ(out[size_t(r)][1].f[k], 3.03125f);
    for (size_t k = 0; k < 3; ++k) EXPECT_EQ(out[size_t(r)][2].f[k], 1.0078125f);
    // reduce_scatter of x's rows 0..2 summed: rank r keeps row r
    for (size_t k = 0; k < 2; ++k) EXPECT_EQ(out[size_t(r)][3].f[k], 3 * float(size_t(r) * 2 + k) + 1.5f);
    for (size_t k = 0; k < 24; ++k) EXPECT_EQ(out[size_t(r)][4].f[k], ranks[k / 8].at("x").f[k % 8]);
  }
  // shard: this rank's rows, no exchange.
  Fn sh;
  Value* z = sh.b.input("z", {DType::f32, {4, 2}});
  sh.b.output(sh.b.create1(OpKind::Shard, {z}, {{"ranks", int64_t(2)}}));
  HostTensor zv = HostTensor::zeros({DType::f32, {4, 2}});
  for (size_t k = 0; k < 8; ++k) zv.f[k] = float(k);
  auto shards = interpretRanks(sh.g, {{{"z", zv}}, {{"z", zv}}});
  EXPECT_EQ(shards[0][0].f, (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(shards[1][0].f, (std::vector<float>{4, 5, 6, 7}));
  // One rank: the identity.
  Fn one;
  Value* y = one.b.input("y", {DType::f32, {2}});
  one.env["y"] = ftensor({DType::f32, {2}}, {1.5f, -2.f});
  EXPECT_EQ(one.run1(one.b.create1(OpKind::AllReduce, {y}, {{"ranks", int64_t(1)}, {"reduce", std::string("mean")}})).f,
            (std::vector<float>{1.5f, -2.f}));
}

// ---------------------------------------------------------------------------------------
// Coverage: a new op in ir/ops.def fails here until it has an interpreter test.

TEST(InterpCoverage, EveryOpKindIsTested) {
  for (const OpInfo& info : allOps())
    EXPECT_TRUE(coveredKinds().count(info.kind)) << "no interpreter test covers '" << info.name << "'";
}

}  // namespace
