// A map keyed by string views (params and values by name), for tables the compiler rebuilds
// on every pass. std::unordered_map allocates a node per entry and a lookup chases the bucket,
// the node and the key's characters: at a thousand layers (27,000 params, 500,000 value
// names) those misses made the verifier's name checks grow faster than the graph (issue 39).
// Here each slot keeps the key's hash beside it, in one open-addressed array (linear
// probing), so a probe compares characters only when the hashes match.
//
// The keys are views: the strings they view must outlive the table (the graph's own names).
#pragma once
#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fusec {

template <class V>
class StringTable {
 public:
  // Sized for `expected` keys without growing.
  explicit StringTable(size_t expected = 0) { slots_.resize(capacityFor(expected)); }

  // Adds `key` -> `value` unless `key` is there; false when it was (its value unchanged).
  bool emplace(std::string_view key, V value) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(capacityFor(size_ + 1));
    Slot& s = slots_[probe(key, hashOf(key))];
    if (s.hash != 0) return false;
    s = {hashOf(key), key, std::move(value)};
    ++size_;
    return true;
  }
  bool insert(std::string_view key) { return emplace(key, V{}); }

  const V* find(std::string_view key) const {
    if (slots_.empty()) return nullptr;  // moved from
    const Slot& s = slots_[probe(key, hashOf(key))];
    return s.hash == 0 ? nullptr : &s.value;
  }
  const V& at(std::string_view key) const {
    if (const V* v = find(key)) return *v;
    throw std::out_of_range("StringTable::at: no key \"" + std::string(key) + "\"");
  }
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  size_t size() const { return size_; }

 private:
  struct Slot {
    size_t hash = 0;  // 0: empty (a key's hash has its low bit set)
    std::string_view key;
    V value{};
  };
  static size_t hashOf(std::string_view key) { return std::hash<std::string_view>()(key) | 1; }
  static size_t capacityFor(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap *= 2;
    return cap;
  }
  // The index of the slot holding `key`, or of the empty slot where it would go. The home slot
  // takes the hash's bits above the low one (which is always set).
  size_t probe(std::string_view key, size_t h) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = (h >> 1) & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.hash == 0 || (s.hash == h && s.key == key)) return i;
    }
  }
  void rehash(size_t cap) {
    std::vector<Slot> old(cap);
    old.swap(slots_);
    for (Slot& s : old)
      if (s.hash != 0) slots_[probe(s.key, s.hash)] = std::move(s);
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace fusec
