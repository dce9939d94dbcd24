// InlineVector (support/inline_vector.h) with elements that own memory: strings (copied,
// moved, destroyed: AddressSanitizer in CI sees a double destroy or a leak) and unique_ptrs
// (move-only, as Op::results holds them), and Shape (its int64_t instance), against a
// std::vector doing the same edits on both sides of the inline capacity.
#include "support/inline_vector.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ir/shape.h"

namespace fusec {
namespace {

// Random edits of an InlineVector V and of a std::vector side by side, lengths crossing the
// inline capacity both ways; inserts and pushes take elements from the vector itself
// (aliasing). `item` makes an element from a number.
template <class V, class Item>
void randomEditsMatchAVector(const Item& item, uint32_t seed) {
  using T = typename V::value_type;
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 300; ++trial) {
    V s;
    std::vector<T> v;
    for (int step = 0; step < 40; ++step) {
      const T x = item(uint32_t(rng() % 100));
      const size_t pos = v.empty() ? 0 : rng() % (v.size() + 1);
      switch (rng() % 12) {
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
          std::vector<T> prefix(v.begin(), v.begin() + ptrdiff_t(n));
          v.insert(v.begin() + ptrdiff_t(pos), prefix.begin(), prefix.end());
          break;
        }
        case 6: s.insert(s.begin() + pos, 3, x); v.insert(v.begin() + ptrdiff_t(pos), 3, x); break;
        case 7: {
          V t = s;  // copy, then back through a move
          s = std::move(t);
          break;
        }
        case 8: if (v.size() > 2) { s.erase(s.begin() + 1, s.end() - 1); v.erase(v.begin() + 1, v.end() - 1); } break;
        case 9: if (!v.empty()) { s.push_back(s.front()); v.push_back(v.front()); } break;
        case 10: {
          std::vector<T> w = s;  // out to a vector and back
          s = std::move(w);
          break;
        }
        case 11: if (!v.empty()) { s.resize(s.size() + 3, s.back()); v.resize(v.size() + 3, v.back()); } break;
      }
      ASSERT_EQ(std::vector<T>(s.begin(), s.end()), v) << "trial " << trial << " step " << step;
      ASSERT_EQ(s.size(), v.size());
      if (!v.empty()) {
        ASSERT_EQ(s.front(), v.front());
        ASSERT_EQ(s.back(), v.back());
      }
    }
  }
}

TEST(InlineVector, ShapesMatchAVectorUnderRandomEdits) {
  randomEditsMatchAVector<Shape>([](uint32_t x) { return int64_t(x); }, 7);
}

// Long enough that every string owns a heap block.
TEST(InlineVector, StringsMatchAVectorUnderRandomEdits) {
  randomEditsMatchAVector<InlineVector<std::string, 2>>(
      [](uint32_t x) { return "element number " + std::to_string(x) + " of a longer string"; }, 11);
}

TEST(InlineVector, HoldsMoveOnlyElementsAndMovesThemInOrOutOfLine) {
  InlineVector<std::unique_ptr<int>, 1> a;
  a.push_back(std::make_unique<int>(1));
  EXPECT_EQ(a.capacity(), 1u);
  const int* first = a[0].get();
  a.push_back(std::make_unique<int>(2));  // now on the heap: the pointee stays where it was
  a.insert(a.begin(), std::make_unique<int>(0));
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[1].get(), first);
  EXPECT_EQ(*a[0] + *a[1] + *a[2], 3);
  InlineVector<std::unique_ptr<int>, 1> b = std::move(a);
  EXPECT_TRUE(a.empty());  // NOLINT: a moved-from vector is empty and usable
  EXPECT_EQ(b.size(), 3u);
  b.erase(b.begin(), b.begin() + 2);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(*b[0], 2);
  InlineVector<std::unique_ptr<int>, 1> c = std::move(b);  // one element, inline: moved one by one
  EXPECT_EQ(*c.at(0), 2);
  EXPECT_THROW(c.at(1), std::out_of_range);
  std::vector<std::unique_ptr<int>> w;
  w.push_back(std::make_unique<int>(5));
  w.push_back(std::make_unique<int>(6));
  c = std::move(w);
  EXPECT_EQ(*c[0] * *c[1], 30);
}

}  // namespace
}  // namespace fusec
