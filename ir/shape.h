// A tensor shape: a vector of dimensions that keeps up to kInline of them inside itself.
//
// Every Value carries a Type, and Types are copied everywhere: the verifier infers each op's
// result types from copies of its operands' after every pass, builders and rewrites copy the
// types they derive from. With std::vector<int64_t> each copy was a heap allocation, a third
// of all the allocations of a compile, and a Value's dimensions lived in a second block away
// from the Value itself (issue 39: the time a layer grew with depth mostly in the allocator
// and in cache misses). Transformer shapes have rank 6 at most, so they now live inline; a
// longer one (the IR allows any rank) moves to the heap, with the same behaviour.
//
// The interface is the part of std::vector<int64_t> the compiler uses, and a Shape converts
// to and from std::vector<int64_t> (attributes such as `shape` and `perm` are vectors).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace fusec {

class Shape {
 public:
  static constexpr uint32_t kInline = 6;

  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  explicit Shape(size_t n, int64_t value = 0) { assign(n, value); }
  template <class It, class = std::enable_if_t<!std::is_integral_v<It>>>
  Shape(It first, It last) {
    assign(first, last);
  }
  Shape(const std::vector<int64_t>& v) { assign(v.begin(), v.end()); }  // NOLINT: implicit by design
  Shape(const Shape& o) { assign(o.begin(), o.end()); }
  Shape(Shape&& o) noexcept { take(o); }
  ~Shape() { release(); }

  Shape& operator=(const Shape& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  Shape& operator=(Shape&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  Shape& operator=(std::initializer_list<int64_t> dims) {
    assign(dims.begin(), dims.end());
    return *this;
  }
  operator std::vector<int64_t>() const { return std::vector<int64_t>(begin(), end()); }  // NOLINT

  template <class It, class = std::enable_if_t<!std::is_integral_v<It>>>
  void assign(It first, It last) {
    // Counted first, so that an input aliasing this shape is read before anything moves.
    const size_t n = size_t(std::distance(first, last));
    if (n > cap_) {
      Shape grown;
      grown.reserve(n);
      std::copy(first, last, grown.data());
      grown.size_ = uint32_t(n);
      *this = std::move(grown);
      return;
    }
    std::copy(first, last, data());
    size_ = uint32_t(n);
  }
  void assign(size_t n, int64_t value) {
    clear();
    resize(n, value);
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return cap_; }
  int64_t* data() { return onHeap() ? heap_ : inline_; }
  const int64_t* data() const { return onHeap() ? heap_ : inline_; }

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

  int64_t& operator[](size_t i) { return data()[i]; }
  const int64_t& operator[](size_t i) const { return data()[i]; }
  int64_t& at(size_t i) {
    if (i >= size_) throw std::out_of_range("Shape::at");
    return data()[i];
  }
  const int64_t& at(size_t i) const {
    if (i >= size_) throw std::out_of_range("Shape::at");
    return data()[i];
  }
  int64_t& front() { return data()[0]; }
  const int64_t& front() const { return data()[0]; }
  int64_t& back() { return data()[size_ - 1]; }
  const int64_t& back() const { return data()[size_ - 1]; }

  void reserve(size_t n) {
    if (n <= cap_) return;
    auto* grown = new int64_t[n];
    std::copy(begin(), end(), grown);
    if (onHeap()) delete[] heap_;
    heap_ = grown;
    cap_ = uint32_t(n);
  }
  void clear() { size_ = 0; }
  void resize(size_t n, int64_t value = 0) {
    if (n > cap_) reserve(std::max<size_t>(n, size_t(cap_) * 2));
    for (size_t i = size_; i < n; ++i) data()[i] = value;
    size_ = uint32_t(n);
  }
  void push_back(int64_t d) {
    if (size_ == cap_) reserve(size_t(cap_) * 2);
    data()[size_++] = d;
  }
  int64_t& emplace_back(int64_t d) {
    push_back(d);
    return back();
  }
  void pop_back() { --size_; }

  iterator insert(const_iterator pos, int64_t d) { return insert(pos, &d, &d + 1); }
  iterator insert(const_iterator pos, size_t n, int64_t d) {
    const size_t at = size_t(pos - begin());
    Shape tail(begin() + at, end());
    resize(at);
    for (size_t i = 0; i < n; ++i) push_back(d);
    for (int64_t t : tail) push_back(t);
    return begin() + at;
  }
  template <class It, class = std::enable_if_t<!std::is_integral_v<It>>>
  iterator insert(const_iterator pos, It first, It last) {
    // Through a copy: the inserted range may be part of this shape.
    const size_t at = size_t(pos - begin());
    Shape mid(first, last), tail(begin() + at, end());
    resize(at);
    for (int64_t d : mid) push_back(d);
    for (int64_t t : tail) push_back(t);
    return begin() + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<int64_t> dims) {
    return insert(pos, dims.begin(), dims.end());
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const size_t at = size_t(first - begin()), n = size_t(last - first);
    std::copy(begin() + at + n, end(), begin() + at);
    size_ -= uint32_t(n);
    return begin() + at;
  }

  friend bool operator==(const Shape& a, const Shape& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }
  friend bool operator<(const Shape& a, const Shape& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  bool onHeap() const { return cap_ > kInline; }
  void release() {
    if (onHeap()) delete[] heap_;
    cap_ = kInline;
    size_ = 0;
  }
  // Moves `o`'s dimensions here (this one empty and inline) and leaves `o` empty.
  void take(Shape& o) {
    if (o.onHeap()) {
      heap_ = o.heap_;
      cap_ = o.cap_;
      o.cap_ = kInline;
    } else {
      std::copy(o.inline_, o.inline_ + o.size_, inline_);
    }
    size_ = o.size_;
    o.size_ = 0;
  }

  union {
    int64_t inline_[kInline];
    int64_t* heap_;
  };
  uint32_t size_ = 0;
  uint32_t cap_ = kInline;
};

}  // namespace fusec
