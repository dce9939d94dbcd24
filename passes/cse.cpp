// Common subexpression elimination: one forward sweep per graph with a hash table of the
// ops seen so far and a replacement map applied to operands as we go. Two ops merge when
// they have the same kind, operands, attributes (floats compared bit for bit) and result
// types; the first one stays (with its value names). The operands of add, mul, and, or, eq
// and ne are compared as a set (these are exactly commutative). `input` and `param` ops are
// never merged. Kernel ops merge only when, besides the above, their bodies print
// identically (after CSE of the bodies themselves). Kernel bodies are processed recursively.
// A select whose two choices merge into one value becomes that value.
#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "ir/printer.h"
#include "passes/pass.h"
#include "support/ptr_hash.h"

namespace fusec {
namespace {

bool isCommutative(OpKind k) {
  switch (k) {
    case OpKind::Add: case OpKind::Mul: case OpKind::And: case OpKind::Or:
    case OpKind::Eq: case OpKind::Ne:
      return true;
    default:
      return false;
  }
}

inline void mix(size_t& h, size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); }

size_t hashAttr(const AttrValue& a) {
  size_t h = a.index();
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) mix(h, std::hash<int64_t>{}(v));
        else if constexpr (std::is_same_v<T, double>) mix(h, std::hash<uint64_t>{}(std::bit_cast<uint64_t>(v)));
        else if constexpr (std::is_same_v<T, bool>) mix(h, v ? 1 : 2);
        else if constexpr (std::is_same_v<T, std::string>) mix(h, std::hash<std::string>{}(v));
        else
          for (int64_t x : v) mix(h, std::hash<int64_t>{}(x));
      },
      a);
  return h;
}

// Attribute equality with floats compared by bit pattern (so -0 != 0 and NaN == NaN).
bool sameAttr(const AttrValue& a, const AttrValue& b) {
  if (a.index() != b.index()) return false;
  if (auto* x = std::get_if<double>(&a)) return std::bit_cast<uint64_t>(*x) == std::bit_cast<uint64_t>(std::get<double>(b));
  return a == b;
}

struct Key {
  Op* op = nullptr;
  std::vector<Value*> operands;  // sorted for commutative ops
  std::string body;              // printed body of a kernel
  size_t hash = 0;
};

struct KeyHash {
  size_t operator()(const Key& k) const { return k.hash; }
};

struct KeyEq {
  bool operator()(const Key& a, const Key& b) const {
    const Op& x = *a.op;
    const Op& y = *b.op;
    if (a.hash != b.hash || x.kind != y.kind || a.operands != b.operands) return false;
    if (x.attrs.size() != y.attrs.size() || x.results.size() != y.results.size()) return false;
    for (size_t i = 0; i < x.attrs.size(); ++i)
      if (!sameAttr(x.attrs[i], y.attrs[i])) return false;
    for (size_t i = 0; i < x.results.size(); ++i)
      if (x.results[i]->type != y.results[i]->type) return false;
    return a.body == b.body;
  }
};

Key makeKey(Op& op) {
  Key k;
  k.op = &op;
  k.operands = op.operands;
  if (isCommutative(op.kind)) std::sort(k.operands.begin(), k.operands.end(), std::less<Value*>());
  if (op.body) k.body = printGraph(*op.body);
  size_t h = size_t(op.kind);
  for (Value* v : k.operands) mix(h, std::hash<const void*>{}(v));
  for (const AttrValue& a : op.attrs) mix(h, hashAttr(a));
  for (auto& r : op.results) {
    mix(h, size_t(r->type.dtype));
    for (int64_t d : r->type.shape) mix(h, std::hash<int64_t>{}(d));
  }
  mix(h, std::hash<std::string>{}(k.body));
  k.hash = h;
  return k;
}

bool cseGraph(Graph& g) {
  bool changed = false;
  PtrMap<Value*, Value*> repl;  // value of a removed op -> the surviving one
  std::unordered_set<Key, KeyHash, KeyEq> seen;
  seen.reserve(g.ops.size());
  PtrSet<const Op*> removed;

  auto remap = [&](Value*& v) {
    auto it = repl.find(v);
    if (it != repl.end()) v = it->second;  // targets are never replaced themselves
  };

  for (auto& opPtr : g.ops) {
    Op& op = *opPtr;
    for (Value*& v : op.operands) remap(v);
    if (op.body) changed |= cseGraph(*op.body);
    if (op.kind == OpKind::Input || op.kind == OpKind::Param) continue;
    // select(c, x, x): its two choices may become one value only here (canonicalize's rule
    // would otherwise need another round after CSE).
    if (op.kind == OpKind::Select && op.operands[1] == op.operands[2] && op.operands[1]->type == op.result()->type) {
      repl[op.result()] = op.operands[1];
      removed.insert(&op);
      changed = true;
      continue;
    }
    Key key = makeKey(op);
    auto it = seen.find(key);
    if (it == seen.end()) {
      seen.insert(std::move(key));
      continue;
    }
    Op& first = *it->op;
    for (size_t i = 0; i < op.results.size(); ++i) repl[op.results[i].get()] = first.results[i].get();
    removed.insert(&op);
    changed = true;
  }
  if (!removed.empty()) {
    for (Value*& v : g.outputs) remap(v);
    g.eraseIf([&](Op* op) { return removed.count(op) != 0; });
  }
  return changed;
}

}  // namespace

std::unique_ptr<Pass> createCSEPass() { return std::make_unique<FunctionPass>("cse", &cseGraph); }

}  // namespace fusec
