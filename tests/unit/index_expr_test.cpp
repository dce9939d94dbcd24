// The kernels' index expressions (codegen/index_expr.h): how they print, what ranges they
// derive, and that the simplifying operators keep every value the plain arithmetic gives.
#include <gtest/gtest.h>

#include <climits>
#include <functional>
#include <random>

#include "codegen/body_emitter.h"
#include "codegen/index_expr.h"
#include "ir/error.h"

namespace fusec::codegen {
namespace {

using X = IndexExpr;

TEST(IndexExpr, PrintsAsTheKernelsSpellIndices) {
  const X i = X::var("i", 0, 99), j = X::var("j", 0, 3);
  EXPECT_EQ(X::sum({i * 64, j}).str(), "(i * 64 + j)");
  EXPECT_EQ(X::sum({i}).str(), "(i)");
  EXPECT_EQ(X::sum({i, X(-3)}).str(), "(i - 3)");
  EXPECT_EQ(X::quotient(i, 8).str(), "(i / 8)");
  EXPECT_EQ(X::remainder(X::quotient(i, 8), 4).str(), "(i / 8) % 4");
  EXPECT_EQ(X::product(X::sum({i, j}), 2).str(), "(i + j) * 2");
  EXPECT_EQ(X::var("(fusec_idx)t3").str(), "(fusec_idx)t3");
}

TEST(IndexExpr, DerivesRanges) {
  const X i = X::var("i", 0, 99);
  const IndexRange q = X::quotient(i, 8).range(), r = X::remainder(i, 8).range(), s = X::sum({i * 2, X(5)}).range();
  EXPECT_TRUE(q.known && q.lo == 0 && q.hi == 12);
  EXPECT_TRUE(r.known && r.lo == 0 && r.hi == 7);
  EXPECT_TRUE(s.known && s.lo == 5 && s.hi == 203);
  EXPECT_FALSE(X::sum({i, X::var("opaque")}).range().known);
  EXPECT_EQ(X::remainder(X::var("k", 0, 5), 8).range().hi, 5);
}

TEST(IndexExpr, RefusesNonPositiveFactors) {
  EXPECT_THROW(X::var("i") / 0, Error);
  EXPECT_THROW(X::var("i") % -4, Error);
  EXPECT_THROW(X::var("i") * 0 * -1, Error);
}

TEST(IndexExpr, OperatorsKeepAffineForms) {
  const X i = X::var("i", 0, 99), j = X::var("j", 0, 3);
  EXPECT_EQ(((i + 3) + j).str(), "(i + j + 3)");
  EXPECT_EQ(((i + j) * 4 + i).str(), "(i * 5 + j * 4)");
  EXPECT_EQ((i - 3 + 3).str(), "i");
  EXPECT_EQ((i * 1).str(), "i");
  EXPECT_EQ((X(7) * 6).str(), "42");
}

TEST(IndexExpr, DivisionAndRemainderUseTheRanges) {
  const X a = X::var("a", 0, 9), b = X::var("b", 0, 63), t = X::var("(fusec_idx)t");
  // A position that a reshape merged, split again: no division left.
  EXPECT_EQ(((a * 64 + b) / 64).str(), "a");
  EXPECT_EQ(((a * 64 + b) % 64).str(), "b");
  EXPECT_EQ(((a * 128 + b * 2 + 1) / 2).str(), "(a * 64 + b)");
  EXPECT_EQ((b / 64).str(), "0");
  EXPECT_EQ((b % 64).str(), "b");
  EXPECT_EQ((b / 4 / 2).str(), "(b / 8)");
  EXPECT_EQ((b % 32 % 8).str(), "b % 8");
  EXPECT_EQ(((a * 64 + b + 64) / 64).str(), "(a + 1)");
  EXPECT_EQ(((a * 64 + b + 70) / 64).divisions(), 1);  // b + 6 may reach 64
  // A concat operand's coordinate inside its branch: the ranges say which quotient it has.
  const X c = X::var("c", 0, 127).within(64, 127);
  EXPECT_EQ((c / 64).str(), "1");
  EXPECT_EQ((c % 64).str(), "(c - 64)");
  EXPECT_EQ(((c - 64) / 16).str(), "((c / 16) - 4)");
  EXPECT_EQ(((c - 64) % 16).str(), "c % 16");
  // Nothing is known of an opaque term's range, but a multiple of the divisor still splits
  // off (the whole is an index, so not negative).
  EXPECT_EQ(((t + b) % 64).str(), "((fusec_idx)t + b) % 64");
  EXPECT_EQ(((t * 64 + b) / 64).str(), "(fusec_idx)t");
}

TEST(IndexExpr, DivisionLooksThroughRegistersWhenThatSavesWork) {
  // RoPE's pairs: [.., 64] viewed as [.., 32, 2], the pair index then split by 32 again.
  const X o3 = X::var("o_3", 0, 63), o2 = X::var("o_2", 0, 127);
  const X pair = X::reg("r0_0", o2 * 32 + o3 / 2, 0, 4095);
  EXPECT_EQ((pair / 32).str(), "o_2");
  EXPECT_EQ((pair / 32 % 128).str(), "o_2");
  EXPECT_EQ((pair % 32).str(), "r0_0 % 32");  // (o_3 / 2) is no less work
  EXPECT_EQ(pair.divisions(), 0);
  EXPECT_EQ(pair.expanded(1).divisions(), 1);
}

TEST(IndexExpr, NarrowingIsAVariableOverTheExpression) {
  const X b = X::var("b", 0, 63), j = X::var("j", 0, 3);
  // Printed as the expression, so its divisions are done where it is used.
  const X q = (b / 4).within(0, 15);
  EXPECT_EQ(q.str(), "(b / 4)");
  EXPECT_EQ(q.divisions(), 1);
  // An empty range (a branch no value reaches) claims nothing.
  EXPECT_FALSE(X::var("c", 0, 127).within(200, 300).range().known);
  EXPECT_FALSE(X::reg("r", b, 100, 200).range().known);
  // Its expansion starts from the expression, whatever was expanded before it was narrowed.
  const X r = X::reg("r", b * 64 + j, 0, 4095);
  const X s = r + j;
  EXPECT_EQ(s.expanded(1).str(), "(b * 64 + j * 2)");
  const X w = s.within(0, 4000);
  EXPECT_EQ(w.expanded(1).str(), s.str());
  EXPECT_EQ(w.expanded(2).str(), s.expanded(1).str());
}

TEST(IndexExpr, LinearizeAndDelinearizeRoundTrip) {
  // [4, 1, 6, 8]: size-1 dims and zero coordinates add nothing to the position.
  KernelBuilder w;
  const Shape shape{4, 1, 6, 8};
  const X p = X::var("p", 0, 191);
  const Index idx = delinearize(w, p, shape, "c");
  EXPECT_EQ(w.str(), "const fusec_idx c_3 = p % 8;\nconst fusec_idx c_2 = (p / 8) % 6;\nconst fusec_idx c_0 = (p / 48);\n");
  EXPECT_EQ(idx[1].str(), "0");
  EXPECT_EQ(linearize(idx, shape).str(), "(c_0 * 48 + c_2 * 8 + c_3)");
  for (int64_t at = 0; at < 192; ++at) EXPECT_EQ(linearize(idx, shape).evaluate({{"p", at}}), at);
  // The same position split for another shape divides the original position, not the
  // registers' sum again.
  KernelBuilder w2;
  const Index again = delinearize(w2, linearize(idx, shape), {24, 8}, "d");
  EXPECT_EQ(again[1].str(), "c_3");
  EXPECT_EQ(w2.str(), "const fusec_idx d_0 = (c_0 * 6 + c_2);\n");
  EXPECT_EQ(linearize({X(0), X(0)}, {3, 5}).str(), "0");
}

// Random expressions built with the simplifying operators, against the same arithmetic done
// on numbers, at every assignment of three small variables. Subtraction only of constants
// the value is known to exceed (indices are never negative).
struct Built {
  X e;
  std::function<int64_t(int64_t, int64_t, int64_t)> f;
  int64_t lo, hi;  // the values it takes over the whole domain
};

class RandomExprs {
 public:
  explicit RandomExprs(uint32_t seed) : rng_(seed) {}
  Built make(int depth) {
    const int pick = depth == 0 ? int(rng_() % 2) : int(rng_() % 8);
    static const int64_t factors[] = {1, 2, 3, 4, 6, 8, 12, 16, 32, 64};
    const int64_t k = factors[rng_() % 10];
    switch (pick) {
      case 0: {
        static const char* names[] = {"a", "b", "c"};
        const int v = int(rng_() % 3);
        return finish(X::var(names[v], 0, kExtent[v] - 1), [v](int64_t a, int64_t b, int64_t c) { return v == 0 ? a : v == 1 ? b : c; });
      }
      case 1: {
        const int64_t c = int64_t(rng_() % 70);
        return finish(X(c), [c](int64_t, int64_t, int64_t) { return c; });
      }
      case 2: {
        Built x = make(depth - 1), y = make(depth - 1);
        return finish(x.e + y.e, [fx = x.f, fy = y.f](int64_t a, int64_t b, int64_t c) { return fx(a, b, c) + fy(a, b, c); });
      }
      case 3: {
        Built x = make(depth - 1);
        return finish(x.e * k, [fx = x.f, k](int64_t a, int64_t b, int64_t c) { return fx(a, b, c) * k; });
      }
      case 4: case 5: {
        Built x = make(depth - 1);
        return finish(x.e / k, [fx = x.f, k](int64_t a, int64_t b, int64_t c) { return fx(a, b, c) / k; });
      }
      case 6: {
        Built x = make(depth - 1);
        return finish(x.e % k, [fx = x.f, k](int64_t a, int64_t b, int64_t c) { return fx(a, b, c) % k; });
      }
      default: {
        // A register of a sub-expression, with its true range, or minus its least value.
        Built x = make(depth - 1);
        if (rng_() % 2 && x.lo > 0) {
          const int64_t m = x.lo;
          return finish(x.e - m, [fx = x.f, m](int64_t a, int64_t b, int64_t c) { return fx(a, b, c) - m; });
        }
        // Or the same value known to lie in its true range (as inside a branch that tested it).
        if (rng_() % 3 == 0) return finish(x.e.within(x.lo, x.hi), x.f);
        return finish(X::reg("r" + std::to_string(regs_++), x.e, x.lo, x.hi), x.f);
      }
    }
  }
  static constexpr int64_t kExtent[3] = {5, 12, 9};

 private:
  Built finish(X e, std::function<int64_t(int64_t, int64_t, int64_t)> f) {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int64_t a = 0; a < kExtent[0]; ++a)
      for (int64_t b = 0; b < kExtent[1]; ++b)
        for (int64_t c = 0; c < kExtent[2]; ++c) lo = std::min(lo, f(a, b, c)), hi = std::max(hi, f(a, b, c));
    return {std::move(e), std::move(f), lo, hi};
  }
  std::mt19937 rng_;
  int regs_ = 0;
};

TEST(IndexExpr, SimplifiedExpressionsKeepTheirValues) {
  RandomExprs gen(2026);
  int simplified = 0;
  for (int n = 0; n < 3000; ++n) {
    const Built x = gen.make(4);
    const IndexRange r = x.e.range();
    if (r.known) {
      ASSERT_LE(r.lo, x.lo) << x.e.str();
      ASSERT_GE(r.hi, x.hi) << x.e.str();
    }
    for (int64_t a = 0; a < RandomExprs::kExtent[0]; ++a)
      for (int64_t b = 0; b < RandomExprs::kExtent[1]; ++b)
        for (int64_t c = 0; c < RandomExprs::kExtent[2]; ++c)
          ASSERT_EQ(x.e.evaluate({{"a", a}, {"b", b}, {"c", c}}), x.f(a, b, c)) << x.e.str() << " at " << a << "," << b << "," << c;
    simplified += x.e.divisions() < 2;
  }
  EXPECT_GT(simplified, 0);
}

}  // namespace
}  // namespace fusec::codegen
