// A vector that keeps up to N elements inside itself and more on the heap, with the part of
// std::vector's interface the compiler uses.
//
// Why: the IR is pointer-linked, and a walk of a deep model's graph is bound by cache misses.
// With std::vector, an op's operands and results, and a value's dimensions, each lived in a
// heap block of their own away from the op or value: one more miss per op on every walk and
// one more allocation per op on every rewrite (issue 39: the time a layer took grew with
// depth, in the allocator and in those misses). Most ops read one to three values and make
// one, and transformer shapes have rank 6 at most, so those now live inline (Op::operands,
// Op::results, Shape); longer ones move to the heap with the same behaviour.
//
// Differences from std::vector: moving an InlineVector whose elements are inline moves the
// elements (pointers into it do not survive a move), and capacity starts at N.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace fusec {

template <class T, uint32_t N>
class InlineVector {
  static_assert(N > 0, "an InlineVector keeps at least one element inline");

 public:
  static constexpr uint32_t kInline = N;

  using value_type = T;
  using size_type = size_t;
  using difference_type = ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using pointer = T*;
  using const_pointer = const T*;
  using iterator = T*;
  using const_iterator = const T*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  InlineVector() = default;
  InlineVector(std::initializer_list<T> items) { assign(items.begin(), items.end()); }
  explicit InlineVector(size_t n) { resize(n); }
  explicit InlineVector(size_t n, const T& value) { assign(n, value); }
  template <class It, class = std::enable_if_t<!std::is_integral_v<It>>>
  InlineVector(It first, It last) {
    assign(first, last);
  }
  InlineVector(const std::vector<T>& v) { assign(v.begin(), v.end()); }  // NOLINT: implicit by design
  InlineVector(std::vector<T>&& v) {                                      // NOLINT: implicit by design
    assign(std::make_move_iterator(v.begin()), std::make_move_iterator(v.end()));
  }
  InlineVector(const InlineVector& o) { assign(o.begin(), o.end()); }
  InlineVector(InlineVector&& o) noexcept { take(o); }
  ~InlineVector() { release(); }

  InlineVector& operator=(const InlineVector& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  InlineVector& operator=(InlineVector&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  InlineVector& operator=(std::initializer_list<T> items) {
    assign(items.begin(), items.end());
    return *this;
  }
  InlineVector& operator=(const std::vector<T>& v) {
    assign(v.begin(), v.end());
    return *this;
  }
  InlineVector& operator=(std::vector<T>&& v) {
    assign(std::make_move_iterator(v.begin()), std::make_move_iterator(v.end()));
    return *this;
  }
  operator std::vector<T>() const { return std::vector<T>(begin(), end()); }  // NOLINT: implicit by design

  template <class It, class = std::enable_if_t<!std::is_integral_v<It>>>
  void assign(It first, It last) {
    // Counted first. What fits is assigned in place, front to back: a range of this vector's
    // own elements starts at or after the first, so each is read before it is overwritten,
    // and it is never longer than the vector (no construction past the old end reads it).
    // What does not fit goes through a fresh vector, this one's elements alive meanwhile.
    const size_t n = size_t(std::distance(first, last));
    if (n > cap_) {
      InlineVector fresh;
      fresh.reserve(n);
      for (; first != last; ++first) fresh.emplace_back(*first);
      *this = std::move(fresh);
      return;
    }
    size_t i = 0;
    for (; i < n && i < size_; ++i, ++first) data()[i] = *first;
    for (; i < n; ++i, ++first) ::new (static_cast<void*>(data() + i)) T(*first);
    if (n < size_) std::destroy(begin() + n, end());
    size_ = uint32_t(n);
  }
  void assign(size_t n, const T& value) {
    InlineVector fresh;
    fresh.resize(n, value);
    *this = std::move(fresh);
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return cap_; }
  T* data() { return onHeap() ? heap_ : inlineData(); }
  const T* data() const { return onHeap() ? heap_ : inlineData(); }

  iterator begin() { return data(); }
  iterator end() { return data() + size_; }
  const_iterator begin() const { return data(); }
  const_iterator end() const { return data() + size_; }
  const_iterator cbegin() const { return begin(); }
  const_iterator cend() const { return end(); }
  reverse_iterator rbegin() { return reverse_iterator(end()); }
  reverse_iterator rend() { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }

  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  T& at(size_t i) {
    if (i >= size_) throw std::out_of_range("InlineVector::at");
    return data()[i];
  }
  const T& at(size_t i) const {
    if (i >= size_) throw std::out_of_range("InlineVector::at");
    return data()[i];
  }
  T& front() { return data()[0]; }
  const T& front() const { return data()[0]; }
  T& back() { return data()[size_ - 1]; }
  const T& back() const { return data()[size_ - 1]; }

  void reserve(size_t n) {
    if (n <= cap_) return;
    T* grown = std::allocator<T>().allocate(n);
    std::uninitialized_move(begin(), end(), grown);
    std::destroy(begin(), end());
    if (onHeap()) std::allocator<T>().deallocate(heap_, cap_);
    heap_ = grown;
    cap_ = uint32_t(n);
  }
  void clear() {
    std::destroy(begin(), end());
    size_ = 0;
  }
  void resize(size_t n) { resizeWith(n, [](T* at) { ::new (static_cast<void*>(at)) T(); }); }
  void resize(size_t n, const T& value) {
    if (n > size_ && n > cap_) {  // `value` may be an element: copied before anything moves
      T copy(value);
      resizeWith(n, [&](T* at) { ::new (static_cast<void*>(at)) T(copy); });
    } else {
      resizeWith(n, [&](T* at) { ::new (static_cast<void*>(at)) T(value); });
    }
  }
  void push_back(const T& x) { emplace_back(x); }
  void push_back(T&& x) { emplace_back(std::move(x)); }
  template <class... Args>
  T& emplace_back(Args&&... args) {
    if (size_ == cap_) {  // the arguments may refer to an element: built before the move
      T made(std::forward<Args>(args)...);
      reserve(size_t(cap_) * 2);
      ::new (static_cast<void*>(data() + size_)) T(std::move(made));
    } else {
      ::new (static_cast<void*>(data() + size_)) T(std::forward<Args>(args)...);
    }
    return data()[size_++];
  }
  void pop_back() {
    --size_;
    std::destroy_at(data() + size_);
  }

  iterator insert(const_iterator pos, const T& x) {
    const size_t at = offset(pos);
    emplace_back(x);
    return rotateIn(at, size_ - 1);
  }
  iterator insert(const_iterator pos, T&& x) {
    const size_t at = offset(pos);
    emplace_back(std::move(x));
    return rotateIn(at, size_ - 1);
  }
  iterator insert(const_iterator pos, size_t n, const T& x) {
    const size_t at = offset(pos), old = size_;
    T copy(x);
    for (size_t i = 0; i < n; ++i) emplace_back(copy);
    return rotateIn(at, old);
  }
  template <class It, class = std::enable_if_t<!std::is_integral_v<It>>>
  iterator insert(const_iterator pos, It first, It last) {
    // Through a copy: the inserted range may be part of this vector.
    const size_t at = offset(pos), old = size_;
    InlineVector mid(first, last);
    for (T& m : mid) emplace_back(std::move(m));
    return rotateIn(at, old);
  }
  iterator insert(const_iterator pos, std::initializer_list<T> items) { return insert(pos, items.begin(), items.end()); }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const size_t at = offset(first), n = size_t(last - first);
    std::move(begin() + at + n, end(), begin() + at);
    std::destroy(end() - n, end());
    size_ -= uint32_t(n);
    return begin() + at;
  }

  friend bool operator==(const InlineVector& a, const InlineVector& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const InlineVector& a, const InlineVector& b) { return !(a == b); }
  friend bool operator<(const InlineVector& a, const InlineVector& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  bool onHeap() const { return cap_ > N; }
  T* inlineData() { return std::launder(reinterpret_cast<T*>(inline_)); }
  const T* inlineData() const { return std::launder(reinterpret_cast<const T*>(inline_)); }
  size_t offset(const_iterator pos) const { return size_t(pos - begin()); }
  // Moves the elements from `from` to the end into place `at` (they were appended).
  iterator rotateIn(size_t at, size_t from) {
    std::rotate(begin() + at, begin() + from, end());
    return begin() + at;
  }
  template <class Make>
  void resizeWith(size_t n, const Make& make) {
    if (n < size_) {
      std::destroy(begin() + n, end());
    } else {
      if (n > cap_) reserve(std::max<size_t>(n, size_t(cap_) * 2));
      for (size_t i = size_; i < n; ++i) make(data() + i);
    }
    size_ = uint32_t(n);
  }
  void release() {
    clear();
    if (onHeap()) std::allocator<T>().deallocate(heap_, cap_);
    cap_ = N;
  }
  // Moves `o`'s elements here (this one empty and inline) and leaves `o` empty and inline.
  void take(InlineVector& o) noexcept {
    if (o.onHeap()) {
      heap_ = o.heap_;
      cap_ = o.cap_;
      o.cap_ = N;
    } else {
      std::uninitialized_move(o.begin(), o.end(), inlineData());
      std::destroy(o.begin(), o.end());
    }
    size_ = o.size_;
    o.size_ = 0;
  }

  union {
    alignas(T) unsigned char inline_[sizeof(T) * N];
    T* heap_;
  };
  uint32_t size_ = 0;
  uint32_t cap_ = N;
};

}  // namespace fusec
