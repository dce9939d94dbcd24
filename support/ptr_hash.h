// Sets and maps keyed by pointers (the IR's Values, Ops, Graphs), for the passes' per-value
// bookkeeping. std::unordered_{set,map} allocate a node per entry and chase it on every
// lookup: at a thousand layers (about 600,000 ops, several such tables alive in every pass)
// the allocator and the cache misses were most of the compile time, and the time grew faster
// than the graph (issue 39). These keep their keys in one open-addressed array (linear
// probing, a multiplicative hash of the address), so an insert allocates nothing but the
// array's occasional doubling.
//
// PtrMap keeps its entries in fixed-size blocks, in insertion order, so that (as with
// std::unordered_map, which the passes were written against) a reference to a mapped value
// stays valid while other keys are inserted, and iteration follows insertion order: a pass
// that walks a map does the same thing on every run, whatever addresses the allocator handed
// out. Erasing leaves a hole in its block (skipped by iteration) until clear().
#pragma once
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace fusec {
namespace ptr_hash {

// The probe start for `p` in a table of 2^bits slots: Fibonacci hashing of the address
// (its low bits are alignment zeros, its high bits barely vary; the multiply mixes both).
inline size_t slotOf(const void* p, unsigned bits) {
  return size_t((uint64_t(reinterpret_cast<uintptr_t>(p)) * 0x9E3779B97F4A7C15ull) >> (64 - bits));
}

// The open-addressed key table both containers use: slots hold a key and a payload (the
// set's is empty, the map's is its entry's position). Empty slots hold nullptr, erased ones
// the tombstone; a null key is refused (the IR never stores one in these tables).
template <class P, class Payload>
class Table {
 public:
  struct Slot {
    P key;
    Payload payload;
  };
  static P tombstone() { return reinterpret_cast<P>(uintptr_t(1)); }
  static bool live(P k) { return k != nullptr && k != tombstone(); }

  size_t size() const { return size_; }
  // The slot holding `k`, or nullptr (always for null and the tombstone: they are no keys,
  // and matching them would hand out an empty or erased slot).
  Slot* find(const void* k) const {
    if (size_ == 0 || k == nullptr || k == static_cast<const void*>(tombstone())) return nullptr;
    for (size_t i = slotOf(k, bits_);; i = (i + 1) & mask()) {
      const Slot& s = slots_[i];
      if (s.key == k) return const_cast<Slot*>(&s);
      if (s.key == nullptr) return nullptr;
    }
  }
  // The slot for `k` and whether it was just claimed (its payload then to be set).
  std::pair<Slot*, bool> claim(P k) {
    if (k == nullptr || k == tombstone()) throw std::invalid_argument("ptr_hash: a null key");
    if ((used_ + 1) * 4 > slots_.size() * 3) grow(size_ + 1);
    Slot* grave = nullptr;
    for (size_t i = slotOf(k, bits_);; i = (i + 1) & mask()) {
      Slot& s = slots_[i];
      if (s.key == k) return {&s, false};
      if (s.key == tombstone()) {
        if (!grave) grave = &s;
      } else if (s.key == nullptr) {
        Slot* t = grave ? grave : &s;
        if (!grave) ++used_;
        t->key = k;
        ++size_;
        return {t, true};
      }
    }
  }
  void bury(Slot* s) {
    s->key = tombstone();
    --size_;
  }
  void reserve(size_t n) {
    if (n * 4 > slots_.size() * 3) grow(n);
  }
  void clear() {
    slots_.clear();
    bits_ = 0;
    size_ = used_ = 0;
  }
  const std::vector<Slot>& slots() const { return slots_; }

 private:
  size_t mask() const { return slots_.size() - 1; }
  // Room for `n` live keys at most 3/4 full, tombstones dropped.
  void grow(size_t n) {
    unsigned bits = 4;
    while ((size_t(1) << bits) * 3 < n * 4 + 4) ++bits;
    std::vector<Slot> old(size_t(1) << bits, Slot{nullptr, Payload{}});
    old.swap(slots_);
    bits_ = bits;
    used_ = size_;
    for (const Slot& s : old) {
      if (!live(s.key)) continue;
      size_t i = slotOf(s.key, bits_);
      while (slots_[i].key != nullptr) i = (i + 1) & mask();
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  unsigned bits_ = 0;
  size_t size_ = 0, used_ = 0;  // live keys; live keys and tombstones
};

struct Nothing {};

}  // namespace ptr_hash

// A set of pointers. Iteration order is the table's (address-dependent, like
// std::unordered_set's): walk it only where the order cannot matter.
template <class P>
class PtrSet {
  using Table = ptr_hash::Table<P, ptr_hash::Nothing>;

 public:
  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = P;
    using difference_type = std::ptrdiff_t;
    using pointer = const P*;
    using reference = const P&;
    iterator() = default;
    iterator(const typename Table::Slot* s, const typename Table::Slot* end) : s_(s), end_(end) { skip(); }
    const P& operator*() const { return s_->key; }
    iterator& operator++() {
      ++s_;
      skip();
      return *this;
    }
    bool operator==(const iterator& o) const { return s_ == o.s_; }
    bool operator!=(const iterator& o) const { return s_ != o.s_; }
    const typename Table::Slot* slot() const { return s_; }

   private:
    void skip() {
      while (s_ != end_ && !Table::live(s_->key)) ++s_;
    }
    const typename Table::Slot* s_ = nullptr;
    const typename Table::Slot* end_ = nullptr;
  };
  using const_iterator = iterator;

  PtrSet() = default;
  PtrSet(std::initializer_list<P> keys) {
    for (P k : keys) insert(k);
  }
  template <class It>
  PtrSet(It first, It last) {
    for (; first != last; ++first) insert(*first);
  }

  std::pair<iterator, bool> insert(P k) {
    auto [s, fresh] = t_.claim(k);
    return {iterator(s, end_()), fresh};
  }
  template <class It>
  void insert(It first, It last) {
    for (; first != last; ++first) insert(*first);
  }
  std::pair<iterator, bool> emplace(P k) { return insert(k); }
  size_t count(const void* k) const { return t_.find(k) ? 1 : 0; }
  bool contains(const void* k) const { return t_.find(k) != nullptr; }
  iterator find(const void* k) const {
    auto* s = t_.find(k);
    return s ? iterator(s, end_()) : end();
  }
  size_t erase(const void* k) {
    auto* s = t_.find(k);
    if (!s) return 0;
    t_.bury(s);
    return 1;
  }
  // Erasing leaves a tombstone, so the iterators of other keys stay valid.
  iterator erase(iterator it) {
    t_.bury(const_cast<typename Table::Slot*>(it.slot()));
    return iterator(it.slot() + 1, end_());
  }
  size_t size() const { return t_.size(); }
  bool empty() const { return t_.size() == 0; }
  void clear() { t_.clear(); }
  void reserve(size_t n) { t_.reserve(n); }
  iterator begin() const { return iterator(t_.slots().data(), end_()); }
  iterator end() const { return iterator(end_(), end_()); }
  bool operator==(const PtrSet& o) const {
    if (size() != o.size()) return false;
    for (P k : *this)
      if (!o.contains(k)) return false;
    return true;
  }

 private:
  const typename Table::Slot* end_() const { return t_.slots().data() + t_.slots().size(); }
  Table t_;
};

// A map from pointers to values: entries in insertion order, references to them stable
// while others are inserted (see the file comment).
template <class K, class V>
class PtrMap {
 public:
  struct Entry {
    K first;
    V second;
  };
  using value_type = Entry;

 private:
  using Table = ptr_hash::Table<K, size_t>;
  static constexpr size_t kBlock = 256;

  template <class E>
  class Iter {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Entry;
    using difference_type = std::ptrdiff_t;
    using pointer = E*;
    using reference = E&;
    Iter() = default;
    Iter(const PtrMap* m, size_t i) : m_(m), i_(i) { skip(); }
    // iterator -> const_iterator, as the standard containers allow.
    template <class F, class = std::enable_if_t<std::is_const_v<E> && !std::is_const_v<F>>>
    Iter(const Iter<F>& o) : m_(o.map()), i_(o.position()) {}
    E& operator*() const { return m_->entry(i_); }
    E* operator->() const { return &m_->entry(i_); }
    Iter& operator++() {
      ++i_;
      skip();
      return *this;
    }
    bool operator==(const Iter& o) const { return i_ == o.i_; }
    bool operator!=(const Iter& o) const { return i_ != o.i_; }
    size_t position() const { return i_; }
    const PtrMap* map() const { return m_; }

   private:
    void skip() {
      while (i_ < m_->count_ && m_->entry(i_).first == nullptr) ++i_;
    }
    const PtrMap* m_ = nullptr;
    size_t i_ = 0;
  };

 public:
  using iterator = Iter<Entry>;
  using const_iterator = Iter<const Entry>;

  PtrMap() = default;
  PtrMap(PtrMap&& o) noexcept { swap(o); }
  PtrMap& operator=(PtrMap&& o) noexcept {
    if (this != &o) {
      clear();
      swap(o);
    }
    return *this;
  }
  void swap(PtrMap& o) noexcept {
    std::swap(t_, o.t_);
    std::swap(blocks_, o.blocks_);
    std::swap(count_, o.count_);
  }
  PtrMap(const PtrMap& o) { *this = o; }
  PtrMap& operator=(const PtrMap& o) {
    if (this == &o) return *this;
    clear();
    for (const Entry& e : o) emplace(e.first, e.second);
    return *this;
  }
  PtrMap(std::initializer_list<std::pair<K, V>> entries) {
    for (auto& e : entries) emplace(e.first, e.second);
  }

  template <class... Args>
  std::pair<iterator, bool> try_emplace(K k, Args&&... args) {
    auto [s, fresh] = t_.claim(k);
    if (fresh) {
      s->payload = count_;
      if (count_ % kBlock == 0) blocks_.emplace_back(kBlock);
      Slot& slot = blocks_.back()[count_ % kBlock];
      ::new (&slot.e) Entry{k, V(std::forward<Args>(args)...)};
      slot.built = true;
      ++count_;
    }
    return {iterator(this, s->payload), fresh};
  }
  template <class... Args>
  std::pair<iterator, bool> emplace(K k, Args&&... args) {
    return try_emplace(k, std::forward<Args>(args)...);
  }
  std::pair<iterator, bool> insert(const std::pair<K, V>& kv) { return try_emplace(kv.first, kv.second); }
  template <class M>
  std::pair<iterator, bool> insert_or_assign(K k, M&& v) {
    auto r = try_emplace(k);
    r.first->second = std::forward<M>(v);
    return r;
  }
  V& operator[](K k) { return try_emplace(k).first->second; }
  V& at(const void* k) { return const_cast<V&>(std::as_const(*this).at(k)); }
  const V& at(const void* k) const {
    auto* s = t_.find(k);
    if (!s) throw std::out_of_range("PtrMap::at: no such key");
    return entry(s->payload).second;
  }
  iterator find(const void* k) {
    auto* s = t_.find(k);
    return s ? iterator(this, s->payload) : end();
  }
  const_iterator find(const void* k) const {
    auto* s = t_.find(k);
    return s ? const_iterator(this, s->payload) : end();
  }
  size_t count(const void* k) const { return t_.find(k) ? 1 : 0; }
  bool contains(const void* k) const { return t_.find(k) != nullptr; }
  size_t erase(const void* k) {
    auto* s = t_.find(k);
    if (!s) return 0;
    Entry& e = entry(s->payload);
    e.first = nullptr;
    e.second = V();
    t_.bury(s);
    return 1;
  }
  iterator erase(iterator it) {
    size_t i = it.position();
    erase(entry(i).first);
    return iterator(this, i + 1);
  }
  size_t size() const { return t_.size(); }
  bool empty() const { return t_.size() == 0; }
  void reserve(size_t n) { t_.reserve(n); }
  void clear() {
    destroy();
    t_.clear();
  }
  ~PtrMap() { destroy(); }

  iterator begin() { return iterator(this, 0); }
  iterator end() { return iterator(this, count_); }
  const_iterator begin() const { return const_iterator(this, 0); }
  const_iterator end() const { return const_iterator(this, count_); }

 private:
  // An entry's storage, built in place when its key is inserted.
  struct Slot {
    Slot() {}
    ~Slot() {
      if (built) e.~Entry();
    }
    union {
      Entry e;
    };
    bool built = false;
  };
  // Iterators of a const map hand out const Entry&; the storage itself is the map's own.
  Entry& entry(size_t i) const { return const_cast<Entry&>(blocks_[i / kBlock][i % kBlock].e); }
  void destroy() {
    blocks_.clear();
    count_ = 0;
  }

  Table t_;
  std::vector<std::vector<Slot>> blocks_;  // never resized: their elements stay put
  size_t count_ = 0;  // entries built, holes included
};

}  // namespace fusec
