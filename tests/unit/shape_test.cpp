// Shape (ir/shape.h) behaves as the std::vector<int64_t> it replaced, on both sides of its
// inline capacity: every operation is checked against a vector doing the same thing.
#include "ir/shape.h"

#include <gtest/gtest.h>

#include <vector>

namespace fusec {
namespace {

std::vector<int64_t> asVector(const Shape& s) { return std::vector<int64_t>(s.begin(), s.end()); }

TEST(Shape, KeepsUpToSixDimensionsInlineAndMoreOnTheHeap) {
  Shape s{1, 2, 3, 4, 5, 6};
  EXPECT_EQ(s.capacity(), Shape::kInline);
  const int64_t* inlineData = s.data();
  EXPECT_GE(reinterpret_cast<const char*>(inlineData), reinterpret_cast<const char*>(&s));
  EXPECT_LT(reinterpret_cast<const char*>(inlineData), reinterpret_cast<const char*>(&s + 1));
  s.push_back(7);
  EXPECT_GT(s.capacity(), Shape::kInline);
  EXPECT_EQ(asVector(s), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}));
  Shape copy = s, moved = std::move(s);
  EXPECT_EQ(copy, moved);
  EXPECT_TRUE(s.empty());  // NOLINT: a moved-from shape is empty and usable
  s.push_back(9);
  EXPECT_EQ(asVector(s), std::vector<int64_t>{9});
}

TEST(Shape, ConvertsToAndFromVectorsAndComparesLikeThem) {
  std::vector<int64_t> v{4, 256, 64};
  Shape s = v;
  std::vector<int64_t> back = s;
  EXPECT_EQ(back, v);
  EXPECT_TRUE(s == v);
  EXPECT_FALSE(s != Shape(v));
  EXPECT_TRUE(Shape({1, 2}) < Shape({1, 3}));
  EXPECT_TRUE(Shape({1, 2}) < Shape({1, 2, 0}));
  EXPECT_FALSE(Shape({2}) < Shape({1, 9}));
  EXPECT_EQ(Shape(3, 7), Shape({7, 7, 7}));
  EXPECT_THROW(Shape().at(0), std::out_of_range);
}

// Random edits against a vector: inline_vector_test.cpp, for Shape as for other element types.

}  // namespace
}  // namespace fusec
