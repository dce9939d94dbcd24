// The kernels' index expressions (codegen/index_expr.h): how they print, what ranges they
// derive, and that the simplifying operators keep every value the plain arithmetic gives.
#include <gtest/gtest.h>

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

TEST(IndexExpr, LinearizeAndDelinearizeRoundTrip) {
  // [4, 1, 6, 8]: size-1 dims and zero coordinates add nothing to the position.
  CodeWriter w;
  const Shape shape{4, 1, 6, 8};
  const Index idx = delinearize(w, X::var("p", 0, 191), shape, "c");
  EXPECT_EQ(w.str(), "const fusec_idx c_3 = p % 8;\nconst fusec_idx c_2 = (p / 8) % 6;\nconst fusec_idx c_0 = (p / 48);\n");
  EXPECT_EQ(idx[1].str(), "0");
  EXPECT_EQ(linearize(idx, shape).str(), "(c_0 * 48 + c_2 * 8 + c_3)");
  for (int64_t p = 0; p < 192; ++p) {
    std::map<std::string, int64_t> at{{"p", p}};
    at["c_3"] = (idx[3].kind() == X::Kind::Var) ? p % 8 : 0;
    at["c_2"] = (p / 8) % 6;
    at["c_0"] = p / 48;
    EXPECT_EQ(linearize(idx, shape).evaluate(at), p);
  }
  EXPECT_EQ(linearize({X(0), X(0)}, {3, 5}).str(), "0");
}

}  // namespace
}  // namespace fusec::codegen
