// support/ptr_hash.h against the standard containers it replaces: random inserts, lookups
// and erases give the same answers; a PtrMap's references survive later inserts and its
// iteration follows insertion order.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "support/ptr_hash.h"


namespace fusec {
namespace {

TEST(PtrHash, SetAgreesWithStdSetUnderRandomInsertsAndErases) {
  std::vector<int> objects(5000);
  std::mt19937 rng(7);
  PtrSet<const int*> mine;
  std::set<const int*> want;
  for (int round = 0; round < 200000; ++round) {
    const int* p = &objects[rng() % objects.size()];
    switch (rng() % 3) {
      case 0: EXPECT_EQ(mine.insert(p).second, want.insert(p).second); break;
      case 1: EXPECT_EQ(mine.erase(p), want.erase(p)); break;
      default: EXPECT_EQ(mine.count(p), want.count(p)); break;
    }
    ASSERT_EQ(mine.size(), want.size());
  }
  std::set<const int*> walked(mine.begin(), mine.end());
  EXPECT_EQ(walked, want);
  mine.clear();
  EXPECT_TRUE(mine.empty());
  EXPECT_EQ(mine.count(&objects[0]), 0u);
  EXPECT_TRUE(mine.insert(&objects[0]).second);
}

TEST(PtrHash, MapAgreesWithStdMapAndKeepsInsertionOrder) {
  std::vector<int> objects(3000);
  std::mt19937 rng(11);
  PtrMap<const int*, std::string> mine;
  std::map<const int*, std::string> want;
  std::vector<const int*> order;  // keys in the order they were (re)inserted
  for (int round = 0; round < 100000; ++round) {
    const int* p = &objects[rng() % objects.size()];
    switch (rng() % 4) {
      case 0: {
        std::string v = std::to_string(round);
        bool fresh = mine.try_emplace(p, v).second;
        EXPECT_EQ(fresh, want.emplace(p, v).second);
        if (fresh) order.push_back(p);
        break;
      }
      case 1:
        EXPECT_EQ(mine.erase(p), want.erase(p));
        order.erase(std::remove(order.begin(), order.end(), p), order.end());
        break;
      case 2:
        if (!want.count(p)) order.push_back(p);
        mine[p] += "x";
        want[p] += "x";
        break;
      default: {
        auto it = mine.find(p);
        ASSERT_EQ(it == mine.end(), !want.count(p));
        if (it != mine.end()) {
          EXPECT_EQ(it->second, want.at(p));
        }
      }
    }
    ASSERT_EQ(mine.size(), want.size());
  }
  std::vector<const int*> walked;
  for (auto& [k, v] : mine) {
    walked.push_back(k);
    EXPECT_EQ(v, want.at(k));
  }
  EXPECT_EQ(walked, order);
}

TEST(PtrHash, MapReferencesSurviveInsertsAndCopiesAreDeep) {
  std::vector<int> objects(10000);
  PtrMap<const int*, std::vector<int>> m;
  std::vector<int>& first = m[&objects[0]];
  first.push_back(42);
  for (size_t i = 1; i < objects.size(); ++i) m[&objects[i]].push_back(int(i));
  EXPECT_EQ(&first, &m.at(&objects[0]));
  EXPECT_EQ(first, std::vector<int>{42});
  PtrMap<const int*, std::vector<int>> copy = m;
  copy[&objects[0]].push_back(1);
  EXPECT_EQ(m.at(&objects[0]).size(), 1u);
  PtrMap<const int*, std::vector<int>> moved = std::move(copy);
  EXPECT_EQ(moved.size(), objects.size());
  EXPECT_EQ(moved.at(&objects[0]).size(), 2u);
  EXPECT_THROW(moved.at(&moved), std::out_of_range);
  auto it = moved.find(&objects[5]);
  it = moved.erase(it);
  EXPECT_EQ(it->first, &objects[6]);
  EXPECT_EQ(moved.count(&objects[5]), 0u);
}

TEST(PtrHash, NullKeysAreRefusedAndNeverFound) {
  int x = 0, y = 0;
  PtrSet<const int*> s;
  EXPECT_THROW(s.insert(nullptr), std::invalid_argument);
  s.insert(&x);
  s.insert(&y);
  s.erase(&y);  // leaves a tombstone
  EXPECT_EQ(s.count(nullptr), 0u);  // a non-empty table has empty slots: null must not match one
  EXPECT_TRUE(s.find(nullptr) == s.end());
  EXPECT_EQ(s.count(reinterpret_cast<const int*>(uintptr_t(1))), 0u);  // nor the tombstone an erased slot
  PtrMap<const int*, int> m;
  EXPECT_THROW(m[nullptr], std::invalid_argument);
  m[&x] = 1;
  EXPECT_EQ(m.count(nullptr), 0u);
  EXPECT_TRUE(m.find(nullptr) == m.end());
  EXPECT_EQ(m.erase(nullptr), 0u);
  EXPECT_EQ(m.size(), 1u);
}

}  // namespace
}  // namespace fusec
