// support/string_table.h against std::unordered_map: random inserts and lookups of names
// that share prefixes (as the IR's do) give the same answers through every growth.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "support/string_table.h"

namespace fusec {
namespace {

TEST(StringTable, AgreesWithUnorderedMapThroughGrowth) {
  std::vector<std::string> names;
  for (int l = 0; l < 400; ++l)
    for (const char* w : {"attn.q_proj.weight", "attn.k_proj.weight", "mlp.w1.weight", "ln1.weight"})
      names.push_back("layers." + std::to_string(l) + "." + w);
  names.push_back("");  // an empty name is a key like any other
  std::mt19937 rng(3);
  StringTable<int> mine;  // starts at 16 slots: grows many times
  std::unordered_map<std::string, int> want;
  for (int round = 0; round < 20000; ++round) {
    const std::string& k = names[rng() % names.size()];
    if (rng() % 2) {
      const int v = int(rng() % 1000);
      EXPECT_EQ(mine.emplace(k, v), want.emplace(k, v).second) << k;
    } else {
      const int* got = mine.find(k);
      auto it = want.find(k);
      ASSERT_EQ(got != nullptr, it != want.end()) << k;
      if (got) {
        EXPECT_EQ(*got, it->second) << k;
      }
    }
    ASSERT_EQ(mine.size(), want.size());
  }
  for (auto& [k, v] : want) EXPECT_EQ(mine.at(k), v);
  EXPECT_THROW(mine.at("layers.400.ln1.weight"), std::out_of_range);
  EXPECT_FALSE(mine.contains("layers.1.attn"));  // a prefix of keys is not a key
}

TEST(StringTable, InsertRefusesADuplicateAndKeepsTheFirstValue) {
  StringTable<int> t(4);
  EXPECT_TRUE(t.emplace("w", 1));
  EXPECT_FALSE(t.emplace("w", 2));
  EXPECT_EQ(t.at("w"), 1);
  StringTable<bool> set;
  EXPECT_TRUE(set.insert("a"));
  EXPECT_FALSE(set.insert(std::string("a")));  // equal characters, another string
  EXPECT_EQ(set.size(), 1u);
}

}  // namespace
}  // namespace fusec
