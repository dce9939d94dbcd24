// Strided views: random chains of reshape/permute/slice/broadcast, read through the resolved
// strides from the base's storage, must equal what the interpreter computes for the chain.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "ir/printer.h"
#include "ir/strided_view.h"
#include "test_util.h"

namespace fusec {
namespace {

using test::f32;

HostTensor iotaTensor(const Type& t) {
  HostTensor h = HostTensor::zeros(t);
  for (size_t k = 0; k < h.size(); ++k) h.f[k] = float(k + 1);
  return h;
}

// Reads `view` of `base` element by element in row-major order of `shape`.
std::vector<float> readView(const StridedView& view, const Shape& shape, const HostTensor& base) {
  std::vector<float> out;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    int64_t off = view.offset;
    for (size_t i = 0; i < shape.size(); ++i) off += idx[i] * view.strides[i];
    out.push_back(base.f.at(size_t(off)));
    for (size_t i = shape.size(); i-- > 0;) {
      if (++idx[i] < shape[i]) break;
      idx[i] = 0;
    }
  }
  return out;
}

TEST(StridedView, TransposeThenSplitIsAView) {
  test::GraphUnderTest t;
  Value* x = t.in("x", iotaTensor(f32({4, 6})));
  Value* p = t.b.permute(x, {1, 0});     // [6,4] strides (1,6)
  Value* r = t.b.reshape(p, {2, 3, 4});  // split the outer dim: still a view
  auto v = resolveView(r);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->base, x);
  EXPECT_EQ(v->strides, (std::vector<int64_t>{3, 1, 6}));
  Value* merged = t.b.reshape(p, {24});  // merging transposed dims needs a copy
  EXPECT_FALSE(resolveView(merged));
}

TEST(StridedView, HeadsLayoutIsGemmReadableButNotUniform) {
  test::GraphUnderTest t;
  // [B=2, T=3, H*dh=8] -> [2,3,2,4] -> permute(0,2,1,3) = [B,H,T,dh]
  Value* x = t.in("x", iotaTensor(f32({2, 3, 8})));
  Value* h = t.b.permute(t.b.reshape(x, {2, 3, 2, 4}), {0, 2, 1, 3});
  auto v = resolveView(h);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->strides, (std::vector<int64_t>{24, 4, 8, 1}));
  EXPECT_TRUE(gemmReadable(*v, h->type.shape));
  EXPECT_FALSE(uniformBatchStride(*v, h->type.shape));
  EXPECT_FALSE(isContiguousView(*v, h->type.shape));
  // One batch dim of heads over a [T, H*dh] matrix is uniform: stride dh.
  Value* y = t.in("y", iotaTensor(f32({3, 8})));
  Value* hy = t.b.permute(t.b.reshape(y, {3, 2, 4}), {1, 0, 2});
  auto vy = resolveView(hy);
  ASSERT_TRUE(vy);
  EXPECT_EQ(uniformBatchStride(*vy, hy->type.shape), std::optional<int64_t>(4));
}

TEST(StridedView, BroadcastRowIsNotGemmReadableAsMatrix) {
  test::GraphUnderTest t;
  Value* x = t.in("x", iotaTensor(f32({5})));
  Value* b = t.b.broadcast(x, {3, 5});  // rows stride 0
  auto v = resolveView(b);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->strides, (std::vector<int64_t>{0, 1}));
  EXPECT_FALSE(gemmReadable(*v, b->type.shape));
}

// Random view chains agree with the interpreter.
TEST(StridedView, RandomChainsMatchTheInterpreter) {
  std::mt19937 rng(7);
  int views = 0, copies = 0;
  for (int trial = 0; trial < 400; ++trial) {
    test::GraphUnderTest t;
    Shape s0;
    int rank = 1 + int(rng() % 4);
    for (int i = 0; i < rank; ++i) s0.push_back(1 + int64_t(rng() % 4));
    Value* x = t.in("x", iotaTensor(f32(s0)));
    Value* v = x;
    for (int step = 0; step < 4; ++step) {
      Shape s = v->type.shape;
      switch (rng() % 4) {
        case 0: {  // permute
          std::vector<int64_t> perm(s.size());
          std::iota(perm.begin(), perm.end(), 0);
          std::shuffle(perm.begin(), perm.end(), rng);
          v = t.b.permute(v, perm);
          break;
        }
        case 1: {  // reshape: split or merge
          Shape ns;
          if (s.size() >= 2 && rng() % 2) {
            size_t i = rng() % (s.size() - 1);
            for (size_t k = 0; k < s.size(); ++k) {
              if (k == i) {
                ns.push_back(s[k] * s[k + 1]);
                ++k;
              } else {
                ns.push_back(s[k]);
              }
            }
          } else {
            for (int64_t d : s) {
              if (d % 2 == 0 && d > 2) {
                ns.push_back(2);
                ns.push_back(d / 2);
              } else {
                ns.push_back(d);
              }
            }
            if (rng() % 2) ns.insert(ns.begin() + int64_t(rng() % (ns.size() + 1)), 1);
          }
          v = t.b.reshape(v, ns);
          break;
        }
        case 2: {  // slice
          int ax = int(rng() % s.size());
          int64_t start = int64_t(rng() % s[size_t(ax)]);
          int64_t step1 = 1 + int64_t(rng() % 2);
          v = t.b.slice(v, ax, start, s[size_t(ax)], step1);
          break;
        }
        default: {  // broadcast: a new leading dim, or a size-1 dim expanded
          Shape ns = s;
          bool expanded = false;
          for (auto& d : ns)
            if (d == 1 && !expanded) {
              d = 3;
              expanded = true;
            }
          if (!expanded) ns.insert(ns.begin(), 2);
          v = t.b.broadcast(v, ns);
        }
      }
    }
    t.b.output(v);
    HostTensor expect = interpret(t.g, t.env).at(0);
    auto view = resolveView(v);
    if (!view) {
      ++copies;
      continue;
    }
    ++views;
    ASSERT_EQ(view->base, x);
    EXPECT_EQ(readView(*view, v->type.shape, t.env.at("x")), expect.f) << printGraph(t.g);
  }
  EXPECT_GT(views, 200);
  EXPECT_GT(copies, 5);
}

}  // namespace
}  // namespace fusec
