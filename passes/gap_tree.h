// The free gaps of an arena, ordered by offset, with the first gap that fits a request found
// in O(log n). memory-plan's first-fit sweep asked a std::map for it by walking every gap
// from the lowest offset: the gaps number the buffers live at once, which in a training step
// grows with the layers (the forward's saved activations), so planning was quadratic in
// depth. Here each node of a treap (a binary search tree by offset, heap-ordered by a
// deterministic pseudo-random priority) also keeps the largest gap of its subtree, and the
// search goes left whenever the left subtree has a gap large enough.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace fusec {

struct Gap {
  int64_t at = 0, bytes = 0;
};

class GapTree {
 public:
  bool empty() const { return root_ < 0; }
  // Adds the gap [at, at + bytes); no gap may start at `at` already.
  void insert(int64_t at, int64_t bytes);
  // Removes the gap that starts at `at` (nothing if there is none).
  void erase(int64_t at);
  // The gap of the lowest offset with at least `bytes` bytes.
  std::optional<Gap> firstFit(int64_t bytes) const;
  // The first gap starting at or after `at`; the last one starting before `at`; the last one.
  std::optional<Gap> atOrAfter(int64_t at) const;
  std::optional<Gap> before(int64_t at) const;
  std::optional<Gap> last() const;

 private:
  struct Node {
    Gap gap;
    int64_t maxBytes;  // the largest gap of this subtree
    uint32_t priority;
    int left = -1, right = -1;
  };
  int64_t maxOf(int n) const { return n < 0 ? INT64_MIN : nodes_[size_t(n)].maxBytes; }
  void update(int n);
  // Splits tree `t` into the gaps starting below `at` and the rest.
  void split(int t, int64_t at, int& below, int& rest);
  int merge(int a, int b);

  std::vector<Node> nodes_;
  std::vector<int> free_;  // indices of erased nodes, reused
  int root_ = -1;
  uint64_t seed_ = 0x9E3779B97F4A7C15ull;  // fixed: the same requests give the same tree
};

}  // namespace fusec
