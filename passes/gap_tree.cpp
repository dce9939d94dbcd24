#include "passes/gap_tree.h"

#include <algorithm>

namespace fusec {

void GapTree::update(int n) {
  Node& x = nodes_[size_t(n)];
  x.maxBytes = std::max({x.gap.bytes, maxOf(x.left), maxOf(x.right)});
}

void GapTree::split(int t, int64_t at, int& below, int& rest) {
  if (t < 0) {
    below = rest = -1;
    return;
  }
  if (nodes_[size_t(t)].gap.at < at) {
    int r = nodes_[size_t(t)].right;
    split(r, at, r, rest);
    nodes_[size_t(t)].right = r;
    below = t;
  } else {
    int l = nodes_[size_t(t)].left;
    split(l, at, below, l);
    nodes_[size_t(t)].left = l;
    rest = t;
  }
  update(t);
}

int GapTree::merge(int a, int b) {
  if (a < 0) return b;
  if (b < 0) return a;
  if (nodes_[size_t(a)].priority > nodes_[size_t(b)].priority) {
    nodes_[size_t(a)].right = merge(nodes_[size_t(a)].right, b);
    update(a);
    return a;
  }
  nodes_[size_t(b)].left = merge(a, nodes_[size_t(b)].left);
  update(b);
  return b;
}

void GapTree::insert(int64_t at, int64_t bytes) {
  // xorshift64: deterministic priorities keep the tree's shape (and so nothing observable,
  // but also its timing) the same on every run.
  seed_ ^= seed_ << 13;
  seed_ ^= seed_ >> 7;
  seed_ ^= seed_ << 17;
  const Node fresh{{at, bytes}, bytes, uint32_t(seed_ >> 32)};
  int n;
  if (!free_.empty()) {
    n = free_.back();
    free_.pop_back();
    nodes_[size_t(n)] = fresh;
  } else {
    n = int(nodes_.size());
    nodes_.push_back(fresh);
  }
  int below, rest;
  split(root_, at, below, rest);
  root_ = merge(merge(below, n), rest);
}

void GapTree::erase(int64_t at) {
  int below, rest, it, after;
  split(root_, at, below, rest);
  split(rest, at + 1, it, after);
  if (it >= 0) free_.push_back(it);  // gaps start at distinct offsets: `it` is one node
  root_ = merge(below, after);
}

std::optional<Gap> GapTree::firstFit(int64_t bytes) const {
  int t = root_;
  if (maxOf(t) < bytes) return std::nullopt;
  for (;;) {
    const Node& x = nodes_[size_t(t)];
    if (maxOf(x.left) >= bytes) t = x.left;
    else if (x.gap.bytes >= bytes) return x.gap;
    else t = x.right;  // its subtree holds the fit: this subtree's maximum is >= bytes
  }
}

std::optional<Gap> GapTree::atOrAfter(int64_t at) const {
  std::optional<Gap> best;
  for (int t = root_; t >= 0;) {
    const Node& x = nodes_[size_t(t)];
    if (x.gap.at >= at) {
      best = x.gap;
      t = x.left;
    } else {
      t = x.right;
    }
  }
  return best;
}

std::optional<Gap> GapTree::before(int64_t at) const {
  std::optional<Gap> best;
  for (int t = root_; t >= 0;) {
    const Node& x = nodes_[size_t(t)];
    if (x.gap.at < at) {
      best = x.gap;
      t = x.right;
    } else {
      t = x.left;
    }
  }
  return best;
}

std::optional<Gap> GapTree::last() const {
  if (root_ < 0) return std::nullopt;
  int t = root_;
  while (nodes_[size_t(t)].right >= 0) t = nodes_[size_t(t)].right;
  return nodes_[size_t(t)].gap;
}

}  // namespace fusec
