// GapTree against a std::map of the same gaps: random inserts and erases of disjoint gaps,
// and every query compared after each change.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "passes/gap_tree.h"

namespace fusec {
namespace {

using Ref = std::map<int64_t, int64_t>;  // offset -> bytes

std::optional<Gap> refFirstFit(const Ref& r, int64_t bytes) {
  for (auto [at, b] : r)
    if (b >= bytes) return Gap{at, b};
  return std::nullopt;
}

void expectSame(const std::optional<Gap>& got, const std::optional<Gap>& want, const char* what) {
  ASSERT_EQ(got.has_value(), want.has_value()) << what;
  if (want) {
    EXPECT_EQ(got->at, want->at) << what;
    EXPECT_EQ(got->bytes, want->bytes) << what;
  }
}

TEST(GapTree, AnswersLikeAScanOfAnOrderedMap) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 20; ++round) {
    GapTree tree;
    Ref ref;
    for (int step = 0; step < 400; ++step) {
      // Gaps are slots of 100 bytes holding 1..100 bytes each, so they never overlap.
      const int64_t slot = int64_t(rng() % 200) * 100;
      if (auto it = ref.find(slot); it != ref.end() && rng() % 2) {
        tree.erase(slot);
        ref.erase(it);
      } else if (it == ref.end()) {
        const int64_t bytes = 1 + int64_t(rng() % 100);
        tree.insert(slot, bytes);
        ref.emplace(slot, bytes);
      }
      ASSERT_EQ(tree.empty(), ref.empty());
      const int64_t want = 1 + int64_t(rng() % 110), probe = int64_t(rng() % 20100);
      expectSame(tree.firstFit(want), refFirstFit(ref, want), "firstFit");
      auto after = ref.lower_bound(probe);
      expectSame(tree.atOrAfter(probe), after == ref.end() ? std::nullopt : std::optional<Gap>(Gap{after->first, after->second}),
                 "atOrAfter");
      expectSame(tree.before(probe), after == ref.begin() ? std::nullopt : std::optional<Gap>(Gap{std::prev(after)->first, std::prev(after)->second}),
                 "before");
      expectSame(tree.last(), ref.empty() ? std::nullopt : std::optional<Gap>(Gap{ref.rbegin()->first, ref.rbegin()->second}), "last");
    }
  }
}

TEST(GapTree, ErasingAnAbsentGapChangesNothing) {
  GapTree tree;
  tree.insert(0, 10);
  tree.insert(20, 5);
  tree.erase(10);
  ASSERT_TRUE(tree.firstFit(6));
  EXPECT_EQ(tree.firstFit(6)->at, 0);
  EXPECT_EQ(tree.firstFit(1)->at, 0);
  tree.erase(0);
  EXPECT_FALSE(tree.firstFit(6));
  EXPECT_EQ(tree.firstFit(5)->at, 20);
}

}  // namespace
}  // namespace fusec
