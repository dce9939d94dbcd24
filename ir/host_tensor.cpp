#include "ir/host_tensor.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "ir/printer.h"

namespace fusec {
namespace {

// Binary floating-point format: p significand bits (implicit bit included), exponents of
// normal numbers in [emin, emax]. Subnormals extend below emin with a fixed quantum.
struct Format {
  int p, emin, emax;
};

Format formatOf(DType d) {
  switch (d) {
    case DType::f32: return {24, -126, 127};
    case DType::bf16: return {8, -126, 127};
    case DType::f16: return {11, -14, 15};
    default: throw Error("internal: " + std::string(dtypeName(d)) + " is not a float dtype");
  }
}

// Rounds a double to the nearest value of `fmt`, ties to even, overflowing to +-inf, with
// subnormals; NaN, inf and signed zeros pass through. Every step is exact in double except
// the one nearbyint (default rounding mode: to nearest even), so the result is correctly
// rounded.
double roundToFormat(double x, Format fmt) {
  if (!std::isfinite(x) || x == 0) return x;
  int e = std::max(std::ilogb(x), fmt.emin);           // below emin: the subnormal quantum
  double quantum = std::ldexp(1.0, e - (fmt.p - 1));   // spacing of representable values
  double r = std::nearbyint(x / quantum) * quantum;    // x / quantum: exact power-of-2 scaling
  double maxFinite = std::ldexp(2.0 - std::ldexp(1.0, 1 - fmt.p), fmt.emax);
  if (std::fabs(r) > maxFinite) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return r;
}

}  // namespace

// The result is representable in the dtype, hence in float: the final cast is exact.
float roundDouble(double x, DType d) { return float(roundToFormat(x, formatOf(d))); }

// int64 -> float dtype with a single rounding. Converting through double first would
// round twice for |v| > 2^53, so the significand is rounded here in integer arithmetic.
float intToFloat(int64_t v, DType d) {
  if (v == 0) return 0.0f;
  Format fmt = formatOf(d);
  uint64_t m = v < 0 ? 0 - uint64_t(v) : uint64_t(v);
  int bits = 64 - std::countl_zero(m);
  int drop = std::max(bits - fmt.p, 0);
  if (drop > 0) {
    uint64_t rem = m & ((uint64_t(1) << drop) - 1), half = uint64_t(1) << (drop - 1);
    m >>= drop;
    if (rem > half || (rem == half && (m & 1))) ++m;  // may carry to p+1 bits: still exact
  }
  double r = std::ldexp(double(m), drop);  // exact: m has at most p+1 <= 25 bits
  return float(roundToFormat(v < 0 ? -r : r, fmt));  // only the overflow check can apply
}

// float -> integer dtype: truncation toward zero; NaN, inf and out-of-range values throw
// instead of hitting C++ UB. float -> bool is x != 0 (NaN is true).
int64_t floatToInt(double x, DType d) {
  if (d == DType::boolean) return x != 0;
  double t = std::trunc(x);
  bool ok = d == DType::i32 ? (t >= -2147483648.0 && t <= 2147483647.0)
                            : (t >= -9223372036854775808.0 && t < 9223372036854775808.0);
  if (!ok) throw Error("cannot convert " + formatFloat(x) + " to " + std::string(dtypeName(d)));
  return int64_t(t);
}

HostTensor HostTensor::zeros(const Type& t) {
  HostTensor h;
  h.type = t;
  if (isFloat(t.dtype)) h.f.assign(size_t(t.numel()), 0.0f);
  else h.i.assign(size_t(t.numel()), 0);
  return h;
}

void HostTensor::set(size_t k, double v) {
  if (isFloat(type.dtype)) f.at(k) = roundDouble(v, type.dtype);
  else i.at(k) = floatToInt(v, type.dtype);  // truncates; NaN/inf/out of range throw
}

// Classic bit trick: add 0x7fff plus the lowest kept bit, then truncate. A carry out of the
// significand correctly bumps the exponent (up to inf). NaNs keep sign and upper payload and
// get the quiet bit, so truncation cannot turn them into inf.
float roundToBF16(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::bit_cast<float>((u | 0x00400000u) & 0xffff0000u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return std::bit_cast<float>(u & 0xffff0000u);
}

float roundToF16(float x) { return float(roundToFormat(double(x), formatOf(DType::f16))); }

float roundToDType(float x, DType d) {
  switch (d) {
    case DType::bf16: return roundToBF16(x);
    case DType::f16: return roundToF16(x);
    default: return x;
  }
}

}  // namespace fusec
