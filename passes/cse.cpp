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
#include <string_view>

#include "ir/numbering.h"
#include "ir/printer.h"
#include "passes/pass.h"

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

// The operands as CSE compares them: a commutative op's two in address order.
struct Operands {
  Value* const* data;
  size_t size;
  Value* pair[2];
  Operands(const Operands&) = delete;  // `data` may point into its own `pair`
  explicit Operands(const Op& op) : data(op.operands.data()), size(op.operands.size()) {
    if (isCommutative(op.kind) && size == 2) {
      pair[0] = std::min(op.operands[0], op.operands[1], std::less<Value*>());
      pair[1] = std::max(op.operands[0], op.operands[1], std::less<Value*>());
      data = pair;
    }
  }
  bool operator==(const Operands& o) const { return size == o.size && std::equal(data, data + size, o.data); }
};

size_t hashOp(const Op& op, const std::string& body) {
  size_t h = size_t(op.kind);
  const Operands operands(op);
  for (size_t i = 0; i < operands.size; ++i) mix(h, std::hash<const void*>{}(operands.data[i]));
  for (const AttrValue& a : op.attrs) mix(h, hashAttr(a));
  for (auto& r : op.results) {
    mix(h, size_t(r->type.dtype));
    for (int64_t d : r->type.shape) mix(h, std::hash<int64_t>{}(d));
  }
  mix(h, std::hash<std::string>{}(body));
  return h;
}

bool sameOp(const Op& x, const Op& y) {
  if (x.kind != y.kind || !(Operands(x) == Operands(y))) return false;
  if (x.attrs.size() != y.attrs.size() || x.results.size() != y.results.size()) return false;
  for (size_t i = 0; i < x.attrs.size(); ++i)
    if (!sameAttr(x.attrs[i], y.attrs[i])) return false;
  for (size_t i = 0; i < x.results.size(); ++i)
    if (x.results[i]->type != y.results[i]->type) return false;
  return true;
}

// The ops seen so far, by their hash: open-addressed slots of (hash, op, body), sized once
// for the whole graph. A std::unordered_set of keys that copied each op's operands allocated
// two blocks per op, and those allocations were most of the pass at a thousand layers.
class SeenOps {
 public:
  explicit SeenOps(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap *= 2;
    slots_.resize(cap);
  }
  // The earlier op equal to `op` (whose printed body, for a kernel, is `body`), or null
  // after recording `op` as seen.
  Op* findOrInsert(Op& op, std::string body) {
    const size_t h = hashOp(op, body);
    for (size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      Slot& s = slots_[i];
      if (!s.op) {
        s = {h, &op, kNoBody};
        if (!body.empty()) {
          s.body = uint32_t(bodies_.size());
          bodies_.push_back(std::move(body));
        }
        return nullptr;
      }
      if (s.hash == h && sameOp(*s.op, op) && bodyOf(s) == body) return s.op;
    }
  }

 private:
  static constexpr uint32_t kNoBody = ~0u;
  struct Slot {
    size_t hash = 0;
    Op* op = nullptr;
    uint32_t body = kNoBody;  // index into bodies_
  };
  std::string_view bodyOf(const Slot& s) const { return s.body == kNoBody ? std::string_view() : bodies_[s.body]; }
  std::vector<Slot> slots_;
  std::vector<std::string> bodies_;  // kernels' printed bodies
};

bool cseGraph(Graph& g) {
  bool changed = false;
  const GraphNumbering numbers(g);  // tables by number (ir/numbering.h)
  std::vector<Value*> repl(numbers.numValues(), nullptr);  // value of a removed op -> the surviving one
  SeenOps seen(g.ops.size());
  std::vector<char> removed(numbers.numOps(), 0);
  bool anyRemoved = false;

  auto remap = [&](Value*& v) {
    if (Value* to = repl[numbers.of(v)]) v = to;  // targets are never replaced themselves
  };

  for (auto& opPtr : g.ops) {
    Op& op = *opPtr;
    for (Value*& v : op.operands) remap(v);
    if (op.body) changed |= cseGraph(*op.body);
    if (op.kind == OpKind::Input || op.kind == OpKind::Param) continue;
    // select(c, x, x): its two choices may become one value only here (canonicalize's rule
    // would otherwise need another round after CSE).
    if (op.kind == OpKind::Select && op.operands[1] == op.operands[2] && op.operands[1]->type == op.result()->type) {
      repl[numbers.of(op.result())] = op.operands[1];
      removed[numbers.of(&op)] = anyRemoved = true;
      changed = true;
      continue;
    }
    Op* earlier = seen.findOrInsert(op, op.body ? printGraph(*op.body) : std::string());
    if (!earlier) continue;
    Op& first = *earlier;
    for (size_t i = 0; i < op.results.size(); ++i) repl[numbers.of(op.results[i].get())] = first.results[i].get();
    removed[numbers.of(&op)] = anyRemoved = true;
    changed = true;
  }
  if (anyRemoved) {
    for (Value*& v : g.outputs) remap(v);
    g.eraseIf([&](Op* op) { return removed[numbers.of(op)] != 0; });
  }
  return changed;
}

}  // namespace

std::unique_ptr<Pass> createCSEPass() { return std::make_unique<FunctionPass>("cse", &cseGraph); }

}  // namespace fusec
