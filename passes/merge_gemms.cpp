// merge-gemms: GEMMs that share an operand become one GEMM (fewer, larger launches), in
// forward and backward. Three shapes of sharing, each merged in its own phase:
//
//   N-merge  matmul(A, B1), matmul(A, B2), ...  (same A, flags, out_perm; the B's equal but
//            for their N axis)  -> matmul(A, concat(B's along N)) and slices of its N axis.
//            Q/K/V from one x, W1/W3: with transpose_b the concat is along axis 0 of whole
//            params, a resident concat (a view, docs/pipeline.md).
//   M-merge  matmul(A1, B), matmul(A2, B), ...  (same B) -> matmul(concat(A's along M), B) and
//            slices of its M axis: the weight gradients of Q/K/V and W1/W3 (B = the input).
//   K-merge  add(matmul(A1, B1), matmul(A2, B2), ...) over an add tree whose interior adds
//            have no other use -> matmul(concat(A's along K), concat(B's along K)): the input
//            gradient of Q/K/V and W1/W3, whose B is then the forward's resident concat of
//            the weights (the same operand order, so CSE makes it one op).
//
// The merge rule (what keeps it a win and keeps the graph a DAG):
//   * no member may depend on another member's result (checked by a search over operands,
//     after earlier merges were applied, so merges of one phase cannot form a cycle);
//   * every concat is either a resident concat (axis 0, all operands whole, distinct params)
//     or a concat of computed activations (no `input`/`param`/`constant`/`iota` below its
//     operands' views): a fused kernel writes those into the concatenated buffer, so the
//     concat costs no extra pass over memory. Anything else (a param concat along another
//     axis, an input) would be a copy per step: not merged;
//   * nothing the merge would split or join is returned (directly or through views): a
//     returned member result would be copied out of the merged GEMM's slice, and a returned
//     concat operand written twice (its own buffer, then the concat). The graphs of the
//     torch.compile backend return what the backward saves (x W1 and x W3 of SwiGLU, the
//     bf16 weights), where merging added a pass over those bytes per call; a training
//     step returns none of these, so its merges are unchanged.
// Concat operands are ordered by their definition order (params: declaration order), so the
// same weights always concat the same way. The ops are re-sorted topologically at the end
// (a stable depth-first order: unchanged where nothing moved).
#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "ir/builder.h"
#include "ir/numbering.h"
#include "ir/strided_view.h"
#include "passes/pass.h"
#include "support/ptr_hash.h"

namespace fusec {
namespace {

enum class Shared { A, B };  // which operand the members of an N- or M-merge share

struct MatmulInfo {
  Value *a, *b;
  bool ta, tb;
  std::vector<int64_t> perm;
  std::string outDType;
  int ra, rb;
  explicit MatmulInfo(const Op& op)
      : a(op.operands[0]), b(op.operands[1]), ta(op.attrBool("transpose_a")), tb(op.attrBool("transpose_b")),
        perm(op.attrInts("out_perm")), outDType(op.attrStr("out_dtype")), ra(a->type.rank()), rb(b->type.rank()) {}
  // The attributes of a matmul merged from members like this one.
  NamedAttrs attrs() const {
    return {{"transpose_a", ta}, {"transpose_b", tb}, {"out_perm", perm}, {"out_dtype", outDType}};
  }
  int kAxisA() const { return ta ? ra - 2 : ra - 1; }
  int mAxisA() const { return ta ? ra - 1 : ra - 2; }
  int kAxisB() const { return tb ? rb - 1 : rb - 2; }
  int nAxisB() const { return tb ? rb - 2 : rb - 1; }
  // Where logical result axis `l` lands in the (out_perm'd) result.
  int64_t resultAxis(int64_t l) const {
    for (size_t j = 0; j < perm.size(); ++j)
      if (perm[j] == l) return int64_t(j);
    return l;
  }
};

bool isSource(OpKind k) {
  return k == OpKind::Input || k == OpKind::Param || k == OpKind::Constant || k == OpKind::Iota;
}

bool isParam(const Value* v) { return v->def && v->def->kind == OpKind::Param; }

// The value a chain of views reads.
const Value* underViews(const Value* v) {
  while (v->def && isViewOp(v->def->kind)) v = v->def->operands[0];
  return v;
}

// The concat rule above.
bool concatOk(const std::vector<Value*>& xs, int64_t axis) {
  PtrSet<const Value*> distinct(xs.begin(), xs.end());
  if (std::all_of(xs.begin(), xs.end(), isParam)) return axis == 0 && distinct.size() == xs.size();
  for (const Value* x : xs) {
    x = underViews(x);
    if (!x->def || isSource(x->def->kind)) return false;
  }
  return true;
}

Shape without(Shape s, int axis) {
  s.erase(s.begin() + axis);
  return s;
}

class Merger {
 public:
  // Ops and values by number (ir/numbering.h): the original ops' numbers are their positions;
  // the ops the merges build are numbered as they are tracked (track()).
  explicit Merger(Graph& g) : g_(g), numbers_(g), original_(g.ops.size()), users_(numbers_.numValues()) {
    reach_.resize(original_);
    for (size_t i = 0; i < g.ops.size(); ++i) {
      Op* op = g.ops[i].get();
      reach_[i] = i;
      for (Value* v : op->operands) users_[numbers_.of(v)].push_back(op);
    }
    dead_.assign(original_, 0);
    for (size_t i = 0; i < g.outputs.size(); ++i) outputSlots_[g.outputs[i]].push_back(i);
  }

  bool run() {
    mergeSums();
    mergeShared(Shared::A);
    mergeShared(Shared::B);
    if (!changed_) return false;
    rebuild();
    return true;
  }

 private:
  // An original op's position; a built op's is past them all.
  size_t posOf(const Op* op) const { return std::min(numbers_.of(op), original_); }
  size_t posOf(const Value* v) const { return v->def ? posOf(v->def) : original_; }
  size_t& reach(const Op* op) { return reach_[numbers_.of(op)]; }
  size_t reach(const Op* op) const { return reach_[numbers_.of(op)]; }
  std::vector<Op*>& usersOf(const Value* v) { return users_[numbers_.of(v)]; }
  bool dead(const Op* op) const { return dead_[numbers_.of(op)] != 0; }
  void kill(const Op* op) { dead_[numbers_.of(op)] = 1; }

  // True when `v`, or a view of it, is a function output.
  bool returned(const Value* v) const {
    std::vector<const Value*> work{v};
    PtrSet<const Value*> seen{v};
    while (!work.empty()) {
      const Value* x = work.back();
      work.pop_back();
      if (outputSlots_.count(x)) return true;
      for (const Op* u : users_[numbers_.of(x)])
        if (isViewOp(u->kind) && u->operands[0] == x)
          for (auto& r : u->results)
            if (seen.insert(r.get()).second) work.push_back(r.get());
    }
    return false;
  }

  // True when some member's result is an ancestor of another member's operands. The search
  // skips every op whose reach (below) lies before the earliest member: none of its
  // ancestors can be a member, so the answer is that of the full search, but it only walks
  // the ops between the members instead of all their ancestors.
  bool interdependent(const std::vector<Op*>& members) const {
    PtrSet<const Op*> targets(members.begin(), members.end());
    size_t earliest = original_;
    for (Op* m : members) earliest = std::min(earliest, posOf(m));
    PtrSet<const Op*> seen;
    std::vector<const Op*> stack;
    auto push = [&](const Value* v) {
      if (v->def && reach(v->def) >= earliest && seen.insert(v->def).second) stack.push_back(v->def);
    };
    for (Op* m : members)
      for (Value* v : m->operands) push(v);
    while (!stack.empty()) {
      const Op* op = stack.back();
      stack.pop_back();
      if (targets.count(op)) return true;
      for (Value* v : op->operands) push(v);
    }
    return false;
  }

  // Reach: an upper bound on the original position of every ancestor of an op (itself
  // included) in the graph as merged so far, non-decreasing along every use. Original ops
  // start at their position; a merge can give an op a later ancestor (a merged GEMM reads all
  // of its members' operands), so the raise flows to the users, stopping where the reach is
  // already that high: only the ops between the members are touched.
  void raise(Op* op, size_t r) {
    std::vector<Op*> work{op};
    while (!work.empty()) {
      Op* o = work.back();
      work.pop_back();
      size_t& cur = reach(o);
      if (cur >= r) continue;
      cur = r;
      for (auto& res : o->results)
        for (Op* u : usersOf(res.get())) work.push_back(u);
    }
  }

  // Registers the ops built into `sg` since the last call: their numbers, uses and reach.
  void track(Graph& sg) {
    size_t& from = tracked_[&sg];
    for (; from < sg.ops.size(); ++from) {
      Op* op = sg.ops[from].get();
      numbers_.add(op);
      users_.resize(numbers_.numValues());
      dead_.resize(numbers_.numOps(), 0);
      size_t r = 0;
      for (Value* v : op->operands) {
        usersOf(v).push_back(op);
        if (v->def) r = std::max(r, reach(v->def));
      }
      reach_.push_back(r);
    }
  }

  // New ops go into a scratch graph (built with type checks) and are later spliced in
  // before `anchor`.
  Graph& scratch(Op* anchor) {
    auto& slot = pending_[anchor];
    if (!slot) slot = std::make_unique<Graph>();
    return *slot;
  }

  // Rewrites the uses of `from` through the use lists (a replaceAllUses per merged member
  // over the whole graph was quadratic) and raises the users' reach to that of `to`.
  // `to` was built into `sg`.
  void replace(Graph& sg, Value* from, Value* to) {
    track(sg);
    if (!from->name.empty() && to->name.empty()) to->name = from->name;
    std::vector<Op*> moved = std::move(usersOf(from));
    usersOf(from).clear();
    const size_t r = reach(to->def);
    for (Op* u : moved) {
      for (Value*& v : u->operands)
        if (v == from) v = to;
      usersOf(to).push_back(u);
      raise(u, r);
    }
    // The outputs through their slots: a training step returns a few values a param, and a
    // scan of them all per merged member was quadratic in the layers.
    if (auto it = outputSlots_.find(from); it != outputSlots_.end()) {
      std::vector<size_t> slots = std::move(it->second);
      outputSlots_.erase(it);
      for (size_t i : slots) g_.outputs[i] = to;
      std::vector<size_t>& now = outputSlots_[to];
      now.insert(now.end(), slots.begin(), slots.end());
    }
  }

  // ---- N- and M-merges
  void mergeShared(Shared shared) {
    using Key = std::tuple<Value*, bool, bool, std::vector<int64_t>, Shape, DType>;
    std::map<Key, std::vector<Op*>> groups;
    std::vector<Key> order;
    for (auto& op : g_.ops) {
      if (op->kind != OpKind::Matmul || dead(op.get())) continue;
      MatmulInfo m(*op);
      Value* common = shared == Shared::A ? m.a : m.b;
      Shape rest = shared == Shared::A ? without(m.b->type.shape, m.nAxisB()) : without(m.a->type.shape, m.mAxisA());
      Key k{common, m.ta, m.tb, m.perm, rest, op->result()->type.dtype};
      auto [it, fresh] = groups.try_emplace(k);
      if (fresh) order.push_back(k);
      it->second.push_back(op.get());
    }
    for (const Key& k : order) {
      auto& members = groups[k];
      if (members.size() < 2) continue;
      std::sort(members.begin(), members.end(), [&](Op* x, Op* y) {
        int i = shared == Shared::A ? 1 : 0;
        return posOf(x->operands[size_t(i)]) < posOf(y->operands[size_t(i)]);
      });
      const int varying = shared == Shared::A ? 1 : 0;
      if (shared == Shared::B) adoptSumOrder(members);
      MatmulInfo first(*members[0]);
      const int64_t axis = shared == Shared::A ? first.nAxisB() : first.mAxisA();
      for (auto& part : mergeable(members, [&](Op* m) { return std::vector<Value*>{m->operands[size_t(varying)]}; },
                                  {axis}))
        mergeSharedGroup(shared, part);
    }
  }

  // The members split by what their concats would be (resident param concats apart from
  // activation concats), each part trimmed greedily to members independent of each other
  // and passing the concat rule. `parts(m)` gives a member's concat operands, one per
  // entry of `axes`.
  template <class Parts>
  std::vector<std::vector<Op*>> mergeable(const std::vector<Op*>& members, Parts parts, const std::vector<int64_t>& axes) {
    std::map<int, std::vector<Op*>> byClass;
    for (Op* m : members) {
      int cls = 0;
      for (Value* v : parts(m)) cls = cls * 2 + isParam(v);
      byClass[cls].push_back(m);
    }
    std::vector<std::vector<Op*>> out;
    for (auto& [cls, ms] : byClass) {
      std::vector<Op*> kept;
      for (Op* m : ms) {
        if (returned(m->result())) continue;
        bool operandReturned = false;
        for (Value* v : parts(m)) operandReturned = operandReturned || (!isParam(v) && returned(underViews(v)));
        if (operandReturned) continue;
        kept.push_back(m);
        bool ok = !interdependent(kept);
        for (size_t i = 0; ok && i < axes.size(); ++i) {
          std::vector<Value*> xs;
          for (Op* k : kept) xs.push_back(parts(k)[i]);
          ok = concatOk(xs, axes[i]) || kept.size() == 1;
        }
        if (!ok) kept.pop_back();
      }
      if (kept.size() >= 2) out.push_back(std::move(kept));
    }
    return out;
  }

  void mergeSharedGroup(Shared shared, const std::vector<Op*>& members) {
    MatmulInfo first(*members[0]);
    const int varying = shared == Shared::A ? 1 : 0;
    const int64_t catAxis = shared == Shared::A ? first.nAxisB() : first.mAxisA();
    std::vector<Value*> parts;
    for (Op* m : members) parts.push_back(m->operands[size_t(varying)]);

    Graph& sg = scratch(members.back());
    Builder b(sg);
    Value* cat = b.concat(parts, catAxis);
    const NamedAttrs attrs = first.attrs();
    Value* merged = b.create1(OpKind::Matmul, varying == 1 ? std::vector<Value*>{first.a, cat} : std::vector<Value*>{cat, first.b},
                              attrs);
    const int64_t rank = merged->type.rank();
    const int64_t axis = first.resultAxis(shared == Shared::A ? rank - 1 : rank - 2);
    int64_t start = 0;
    for (Op* m : members) {
      const int64_t len = m->result()->type.shape[size_t(axis)];
      replace(sg, m->result(), b.slice(merged, axis, start, start + len));
      start += len;
      kill(m);
    }
    changed_ = true;
  }

  // The value under a chain of reshapes (a `[B*T, n]` gradient is a reshape of `[B,T,n]`).
  static const Value* unreshaped(const Value* v) {
    while (v->def && v->def->kind == OpKind::Reshape) v = v->def->operands[0];
    return v;
  }

  // An M-merge (weight gradients dW_i = dY_i^T X) concatenates the same dY_i as the K-merge
  // of the input gradient (dX = sum dY_i W_i): order them the same way, so canonicalize and
  // cse leave one concat that one kernel writes, instead of two orders written twice.
  void adoptSumOrder(std::vector<Op*>& members) {
    std::vector<const Value*> key;
    for (Op* m : members) key.push_back(unreshaped(m->operands[0]));
    std::sort(key.begin(), key.end());
    auto it = sumOrder_.find(key);
    if (it == sumOrder_.end()) return;
    auto rank = [&](Op* m) {
      return std::find(it->second.begin(), it->second.end(), unreshaped(m->operands[0])) - it->second.begin();
    };
    std::stable_sort(members.begin(), members.end(), [&](Op* x, Op* y) { return rank(x) < rank(y); });
  }

  // ---- K-merges over add trees
  void mergeSums() {
    // Roots: adds not used by exactly one add (those are interior to a larger tree). The use
    // counts are those before any merge, taken from users_ while no merge has run (a value
    // the merges build has none).
    std::vector<int> before(numbers_.numValues(), 0);
    for (size_t n = 0; n < before.size(); ++n) before[n] = int(users_[n].size());
    for (const Value* v : g_.outputs) ++before[numbers_.of(v)];
    auto useCount = [&](const Value* v) {
      const size_t n = numbers_.of(v);
      return n < before.size() ? before[n] : 0;
    };

    std::vector<Op*> roots;
    for (auto& op : g_.ops) {
      if (op->kind != OpKind::Add) continue;
      const std::vector<Op*>& u = usersOf(op->result());
      if (useCount(op->result()) == 1 && u.size() == 1 && u[0]->kind == OpKind::Add) continue;
      roots.push_back(op.get());
    }
    for (Op* root : roots) {
      std::vector<Value*> ls;
      std::vector<Op*> interior;
      collect(root->result(), true, ls, interior, useCount);
      mergeSum(root, ls, interior, useCount);
    }
  }

  template <class UseCount>
  void collect(Value* v, bool root, std::vector<Value*>& out, std::vector<Op*>& interior, UseCount& useCount) {
    Op* d = v->def;
    if (d && d->kind == OpKind::Add && (root || useCount(v) == 1)) {
      interior.push_back(d);
      collect(d->operands[0], false, out, interior, useCount);
      collect(d->operands[1], false, out, interior, useCount);
      return;
    }
    out.push_back(v);
  }

  template <class UseCount>
  void mergeSum(Op* root, const std::vector<Value*>& ls, const std::vector<Op*>& interior, UseCount& useCount) {
    using Key = std::tuple<bool, bool, std::vector<int64_t>, std::string, Shape, Shape>;
    std::map<Key, std::vector<Op*>> groups;
    std::vector<Value*> others;
    for (Value* v : ls) {
      Op* d = v->def;
      if (!d || d->kind != OpKind::Matmul || useCount(v) != 1 || dead(d)) {
        others.push_back(v);
        continue;
      }
      MatmulInfo m(*d);
      groups[Key{m.ta, m.tb, m.perm, m.outDType, without(m.a->type.shape, m.kAxisA()), without(m.b->type.shape, m.kAxisB())}]
          .push_back(d);
    }
    bool any = false;
    Graph& sg = scratch(root);
    Builder b(sg);
    std::vector<Value*> terms = others;
    for (auto& [k, members] : groups) {
      std::sort(members.begin(), members.end(),
                [&](Op* x, Op* y) { return posOf(x->operands[1]) < posOf(y->operands[1]); });
      MatmulInfo first(*members[0]);
      auto parts = mergeable(members, [](Op* m) { return m->operands; }, {first.kAxisA(), first.kAxisB()});
      PtrSet<Op*> merged;
      for (auto& part : parts) {
        std::vector<Value*> as, bs;
        for (Op* m : part) {
          as.push_back(m->operands[0]);
          bs.push_back(m->operands[1]);
          merged.insert(m);
          kill(m);
        }
        std::vector<const Value*> key;
        for (Value* a : as) key.push_back(unreshaped(a));
        std::vector<const Value*> sortedKey = key;
        std::sort(sortedKey.begin(), sortedKey.end());
        sumOrder_[sortedKey] = key;
        const NamedAttrs attrs = first.attrs();
        terms.push_back(b.create1(OpKind::Matmul, {b.concat(as, first.kAxisA()), b.concat(bs, first.kAxisB())}, attrs));
        any = true;
      }
      for (Op* m : members)
        if (!merged.count(m)) terms.push_back(m->result());
    }
    if (!any) return;
    Value* sum = terms[0];
    for (size_t i = 1; i < terms.size(); ++i) sum = b.binary(OpKind::Add, sum, terms[i]);
    for (Op* op : interior) kill(op);
    replace(sg, root->result(), sum);
    changed_ = true;
  }

  // Splices the pending ops in before their anchors, drops the dead ones and re-sorts.
  void rebuild() {
    std::vector<std::unique_ptr<Op>> all;
    for (auto& op : g_.ops) {
      auto it = pending_.find(op.get());
      if (it != pending_.end())
        for (auto& n : it->second->ops) {
          n->loc = op->loc;
          all.push_back(std::move(n));
        }
      if (!dead(op.get())) all.push_back(std::move(op));
    }
    // Stable depth-first topological order: each op after its operands' definitions.
    PtrMap<const Op*, size_t> index;
    for (size_t i = 0; i < all.size(); ++i) index[all[i].get()] = i;
    std::vector<bool> emitted(all.size(), false);
    std::vector<std::unique_ptr<Op>> sorted;
    sorted.reserve(all.size());
    std::vector<std::pair<size_t, size_t>> stack;  // (op, next operand to visit)
    for (size_t i = 0; i < all.size(); ++i) {
      if (emitted[i]) continue;
      stack.push_back({i, 0});
      while (!stack.empty()) {
        auto& [k, next] = stack.back();
        Op* op = all[k].get();
        if (next < op->operands.size()) {
          const Op* d = op->operands[next++]->def;
          auto it = d ? index.find(d) : index.end();
          if (it != index.end() && !emitted[it->second]) stack.push_back({it->second, 0});
          continue;
        }
        if (!emitted[k]) {
          emitted[k] = true;
          sorted.push_back(std::move(all[k]));
        }
        stack.pop_back();
      }
    }
    g_.ops = std::move(sorted);
  }

  Graph& g_;
  GraphNumbering numbers_;
  size_t original_;                    // the number of original ops
  std::vector<size_t> reach_;          // by op number
  std::vector<std::vector<Op*>> users_;  // by value number, kept current through merges
  PtrMap<const Value*, std::vector<size_t>> outputSlots_;  // value -> the outputs it is, kept current
  PtrMap<const Graph*, size_t> tracked_;         // scratch graph -> ops tracked
  std::map<Op*, std::unique_ptr<Graph>> pending_;
  std::vector<char> dead_;  // by op number
  std::map<std::vector<const Value*>, std::vector<const Value*>> sumOrder_;  // K-merge concat orders by operand set
  bool changed_ = false;
};

bool mergeGemms(Graph& g) { return Merger(g).run(); }

}  // namespace

std::unique_ptr<Pass> createMergeGemmsPass() { return std::make_unique<FunctionPass>("merge-gemms", &mergeGemms); }

}  // namespace fusec
