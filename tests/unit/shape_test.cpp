// Shape (ir/shape.h) behaves as the std::vector<int64_t> it replaced, on both sides of its
// inline capacity: every operation is checked against a vector doing the same thing.
#include "ir/shape.h"

#include <gtest/gtest.h>

#include <random>
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

// Random operations on a Shape and on a vector side by side, lengths crossing the inline
// capacity both ways; inserts take ranges from the shape itself (aliasing).
TEST(Shape, RandomEditsMatchAVector) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    Shape s;
    std::vector<int64_t> v;
    for (int step = 0; step < 40; ++step) {
      const int64_t x = int64_t(rng() % 100);
      const size_t pos = v.empty() ? 0 : rng() % (v.size() + 1);
      switch (rng() % 9) {
        case 0: s.push_back(x); v.push_back(x); break;
        case 1: if (!v.empty()) { s.pop_back(); v.pop_back(); } break;
        case 2: s.insert(s.begin() + pos, x); v.insert(v.begin() + ptrdiff_t(pos), x); break;
        case 3: if (pos < v.size()) { s.erase(s.begin() + pos); v.erase(v.begin() + ptrdiff_t(pos)); } break;
        case 4: {
          const size_t n = rng() % 12;
          s.resize(n, x);
          v.resize(n, x);
          break;
        }
        case 5: {  // insert a copy of a prefix of itself
          const size_t n = v.empty() ? 0 : rng() % (v.size() + 1);
          s.insert(s.begin() + pos, s.begin(), s.begin() + n);
          std::vector<int64_t> prefix(v.begin(), v.begin() + ptrdiff_t(n));
          v.insert(v.begin() + ptrdiff_t(pos), prefix.begin(), prefix.end());
          break;
        }
        case 6: s.insert(s.begin() + pos, 3, x); v.insert(v.begin() + ptrdiff_t(pos), 3, x); break;
        case 7: {
          Shape t = s;  // copy, then assign back through a move
          s = std::move(t);
          break;
        }
        case 8: if (v.size() > 2) { s.erase(s.begin() + 1, s.end() - 1); v.erase(v.begin() + 1, v.end() - 1); } break;
      }
      ASSERT_EQ(asVector(s), v) << "trial " << trial << " step " << step;
      ASSERT_EQ(s.size(), v.size());
      if (!v.empty()) {
        ASSERT_EQ(s.front(), v.front());
        ASSERT_EQ(s.back(), v.back());
      }
    }
  }
}

}  // namespace
}  // namespace fusec
