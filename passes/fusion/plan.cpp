// Grouping (Inductor style): one group per compute op, then merges of producer/consumer and
// sibling groups whose domains agree (domain.h). Acyclicity is kept by ranks: every group
// and top-level op has a rank, and every edge between them goes from a lower to a higher
// rank (initially the graph position). A merge of A and B (rank A < rank B) takes rank B
// when every other consumer of A ranks above B ("late"), or rank A when every other
// producer of B ranks below A ("early"); otherwise it is refused. Both keep the invariant,
// so the merged graph stays acyclic and sorting by rank gives a valid order; the test is
// local (no reachability search), which keeps fuse linear-ish on xl graphs.
#include "passes/fusion/plan.h"

#include <algorithm>
#include <map>
#include <optional>
#include <span>
#include <set>
#include <string>

#include "ir/attention_assembly.h"
#include "ir/attention_path.h"
#include "ir/collectives.h"
#include "ir/numbering.h"
#include "ir/roles.h"
#include "ir/strided_view.h"
#include "ir/type_rules.h"
#include "ir/use_lists.h"
#include "ir/types.h"
#include "passes/fusion/attention_output.h"
#include "support/ptr_hash.h"

namespace fusec::fusion {

std::string updateGroupKey(const Op& param) {
  if (layerOf(param) >= 0) return "layer " + std::to_string(layerOf(param));
  return ownerName(param);
}

namespace {

bool isSource(const Op& op) { return op.kind == OpKind::Input || op.kind == OpKind::Param; }

// A concat along axis 0 of whole params: memory-plan lays them out adjacently, so it is a view.
bool isResidentConcat(const Op& op) {
  if (op.kind != OpKind::Concat || op.attrInt("axis") != 0) return false;
  for (const Value* v : op.operands)
    if (!v->def || v->def->kind != OpKind::Param) return false;
  return true;
}

// attention and attention_backward: each becomes a kernel of its own (the `attention` family).
bool isAttention(const Op& op) { return op.kind == OpKind::Attention || op.kind == OpKind::AttentionBackward; }

// Ops that stay at top level as they are and never join a group (a collective is NCCL's
// work on its own stream: its operands are materialised, its results read from memory).
bool isFixed(const Op& op) {
  return isSource(op) || op.kind == OpKind::Matmul || op.kind == OpKind::Kernel || isResidentConcat(op) ||
         isCollective(op.kind);
}

struct Group {
  std::vector<Op*> members;
  int64_t rank = 0;
  Domain domain;
  bool fixed = false;   // a top-level op: never merged, never outlined
  bool frozen = false;  // an AdamW multi-tensor group: complete as formed
  bool alive = true;
};

class Planner {
 public:
  explicit Planner(const Graph& g) : g_(g), plan_{GraphNumbering(g)}, numbers_(plan_.numbers), uses_(g, numbers_) {
    // Ops and values by number (ir/numbering.h), readers by value (ir/use_lists.h).
    for (auto& op : g.ops)
      if (op->info().category == OpCategory::Composite && !isAttention(*op))
        throw Error("fuse: " + std::string(op->info().name) + " is a composite op; run decompose before fuse");
    const size_t values = numbers_.numValues();
    srcMemo_.resize(values);
    userMemo_.resize(values);
    plan_.inlinedOps.assign(g.ops.size(), 0);
    plan_.keptTopOps.assign(g.ops.size(), 0);
    demoted_.assign(g.ops.size(), 0);
    output_.assign(values, 0);
    for (Value* v : g.outputs) output_[valueNumber(v)] = 1;
  }
  Planner(const Planner&) = delete;  // numbers_ refers into plan_
  Planner& operator=(const Planner&) = delete;

  Plan run() {
    findBroadcastTables();
    chooseInlined();
    placeHardUses();
    std::fill(srcMemo_.begin(), srcMemo_.end(), std::nullopt);
    chooseInlined();  // again: demoted ops now read as materialised values
    makeGroups();
    absorbOutputPermutes();
    claimOptimizerUpdates();
    mergeProducersIntoConsumers();
    mergeSiblings();
    mergeProducersIntoConsumers();
    absorbBackwardAssembly();
    fuseScattersIntoConsumers();
    return finish();
  }

 private:
  // ---- which ops are recomputed in place --------------------------------------------------

  bool inlined(const Op* op) const { return plan_.inlined(op); }
  void keepTop(const Op* op) { plan_.keptTopOps[size_t(pos(op))] = 1; }
  bool demoted(const Op* op) const { return demoted_[size_t(pos(op))] != 0; }
  void demote(const Op* op) { demoted_[size_t(pos(op))] = 1; }
  bool isOutput(const Value* v) const { return output_[valueNumber(v)] != 0; }

  // The materialised values `v` is computed from (itself unless it is inlined).
  const std::vector<Value*>& sources(Value* v) {
    auto& memo = srcMemo_[valueNumber(v)];
    if (memo) return *memo;
    std::vector<Value*> s;
    if (inlined(v->def)) {
      for (Value* o : v->def->operands)
        for (Value* x : sources(o))
          if (std::find(s.begin(), s.end(), x) == s.end()) s.push_back(x);
    } else {
      s.push_back(v);
    }
    return *(srcMemo_[valueNumber(v)] = std::move(s));
  }

  // Transcendental ops whose result is read through a broadcast into a value at least
  // kTableGrowth times larger: RoPE's cos/sin of position x frequency ([T, d/2]) read by every
  // batch and head, the frequencies ([d/2]) read by every position. Recomputed inside their
  // consumers, such an op runs once per element of the large value instead of once per
  // element of its own (small pow/sin/cos per element made the RoPE kernels of small at batch
  // 64 compute-bound at 7% of the copy bandwidth); materialised, it is a small table that the
  // consumers load like a norm weight, and CSE makes it one table for every layer.
  static constexpr int64_t kTableGrowth = 8;
  // Costly ops (ops.def's FIR_COSTLY: special functions, sqrt, division) are materialised
  // the same way: an RMSNorm's rstd = rsqrt(ms + eps) of a row, recomputed for every element
  // of the row by the norm-weight gradient's column reduction, made that kernel
  // compute-bound; materialised, it is one more output of the row kernel that computes ms.
  void findBroadcastTables() {
    for (auto& owned : g_.ops) {
      const Op* op = owned.get();
      if (!op->info().costly) continue;
      const int64_t n = op->result()->type.numel();
      // Forward through the pointwise and layout ops that would be inlined with it.
      std::vector<const Value*> stack = {op->result()};
      PtrSet<const Value*> seen;
      bool grows = false;
      while (!stack.empty() && !grows && seen.size() < 256) {
        const Value* v = stack.back();
        stack.pop_back();
        if (!seen.insert(v).second) continue;
        grows = v->type.numel() >= kTableGrowth * n;
        for (const Op* u : users(v))
          if (u->info().category == OpCategory::Pointwise || isViewOp(u->kind))
            for (const auto& r : u->results) stack.push_back(r.get());
      }
      if (grows) demote(op);
    }
  }

  void chooseInlined() {
    std::fill(plan_.inlinedOps.begin(), plan_.inlinedOps.end(), 0);
    for (auto& owned : g_.ops) {
      const Op* op = owned.get();
      if (demoted(op)) continue;
      const bool pointwise = op->info().category == OpCategory::Pointwise;
      bool cheap = op->kind == OpKind::Constant || op->kind == OpKind::Iota || isViewOp(op->kind);
      if (pointwise) {
        // Recompute when at most one large stored tensor is read: small ones (a row's
        // statistics, a norm weight) are broadcast loads that cost no extra pass over
        // memory. So x * rstd is recomputed from the residual stream x where it is needed
        // instead of being saved for backward beside x.
        const int64_t n = op->result()->type.numel();
        std::vector<Value*> s;
        for (Value* o : op->operands)
          for (Value* x : sources(o))
            if (x->type.numel() * 4 > n && std::find(s.begin(), s.end(), x) == s.end()) s.push_back(x);
        cheap = s.size() <= 1;
      }
      if (cheap) plan_.inlinedOps[size_t(pos(op))] = 1;
    }
  }

  // GEMM operands and graph outputs need a value in memory: a view stays a top-level view
  // when it reads its base in place the way the user needs, otherwise it (or the inlined op
  // below it) is materialised by a kernel.
  void placeHardUses() {
    for (auto& op : g_.ops)
      if (op->kind == OpKind::Matmul)
        for (Value* v : op->operands) hardUse(v, /*gemm=*/true);
    for (Value* v : g_.outputs) hardUse(v, /*gemm=*/false);
    for (auto& op : g_.ops)  // NCCL reads and writes dense buffers, as an output is
      if (isCollective(op->kind))
        for (Value* v : op->operands) hardUse(v, /*gemm=*/false);
    // So does a kernel that is already there (written by hand, or fused before): nothing
    // recomputes into its body, so a pointwise value it reads is materialised (a top-level
    // view it reads stays as the kernel was built against it).
    for (auto& op : g_.ops)
      if (op->kind == OpKind::Kernel)
        for (Value* v : op->operands)
          if (!isViewOp(v->def->kind)) hardUse(v, /*gemm=*/false);
    for (auto& op : g_.ops)
      if (isAttention(*op))
        for (Value* v : op->operands) attentionUse(v);
  }

  // An attention kernel reads each operand as [..., T, d] rows with unit stride along d and
  // any other strides (baked into its source): a view chain with that layout is cloned into
  // the kernel's body (no copy, e.g. q, k, v straight from the fused QKV GEMM's output);
  // anything else inlined (a cast, a rope) is materialised first, by its own kernel.
  void attentionUse(Value* v) {
    Op* d = v->def;
    if (!inlined(d)) return;
    if (!isViewOp(d->kind)) {
      demote(d);
      return;
    }
    auto view = resolveView(v);
    if (!view || view->strides.empty() || (view->strides.back() != 1 && v->type.shape.back() != 1)) {
      demote(d);
      return;
    }
    const Value* x = view->base;
    if (inlined(x->def)) demote(x->def);  // the base itself must exist in memory
  }

  void hardUse(Value* v, bool gemm) {
    Op* d = v->def;
    if (!inlined(d)) return;
    if (d->kind == OpKind::Constant || d->kind == OpKind::Iota) {
      keepTop(d);
      return;
    }
    if (!isViewOp(d->kind)) {
      demote(d);
      return;
    }
    // gemmReadable is symmetric in the two matrix dims, so transpose flags do not matter.
    auto view = resolveView(v);
    const bool inPlace = view && (gemm ? gemmReadable(*view, v->type.shape) : isContiguousView(*view, v->type.shape));
    if (!inPlace) {
      // A copy kernel (fused with its producers where domains allow). It materialises the
      // view below any reshapes on top: a reshape of a dense value reads it in place, so
      // consumers that read one permute through different reshapes (the attention output
      // as [B, T, D] for the projection and as [B*T, D] for its weight gradient) share
      // one copy instead of each getting its own.
      Value* below = v;
      while (below->def->kind == OpKind::Reshape && inlined(below->def->operands[0]->def) &&
             isViewOp(below->def->operands[0]->def->kind))
        below = below->def->operands[0];
      for (Value* x = v; x != below; x = x->def->operands[0]) keepTop(x->def);
      demote(below->def);
      return;
    }
    Value* x = v;
    while (x->def && isViewOp(x->def->kind)) {
      keepTop(x->def);
      x = x->def->operands[0];
    }
    if (inlined(x->def)) {  // the base itself must exist in memory
      if (x->def->kind == OpKind::Constant || x->def->kind == OpKind::Iota) keepTop(x->def);
      else demote(x->def);
    }
  }

  // ---- groups and the graph between them ---------------------------------------------------

  void makeGroups() {
    groupOf_.assign(g_.ops.size(), -1);
    for (auto& owned : g_.ops) {
      Op* op = owned.get();
      if (inlined(op)) continue;
      Group grp;
      grp.members = {op};
      grp.rank = pos(op);
      grp.fixed = isFixed(*op);
      grp.frozen = isAttention(*op);  // complete as it is: one flash kernel
      if (!grp.fixed) grp.domain = domainOf(*op);
      groupOf_[size_t(pos(op))] = int(groups_.size());
      groups_.push_back(std::move(grp));
    }
  }

  // The op's place in the graph (Op::number, set by the constructor), and a value's number.
  int64_t pos(const Op* op) const { return int64_t(numbers_.of(op)); }
  size_t valueNumber(const Value* v) const { return numbers_.of(v); }
  // The ops that read `v`, in program order.
  std::span<Op* const> users(const Value* v) const { return uses_.readers(v); }
  int groupOf(const Op* op) const { return groupOf_[size_t(pos(op))]; }

  // The ops that read `v` once inlined ops are seen through; kept top-level views count as
  // readers too (they need `v` in memory).
  const std::vector<Op*>& effectiveUsers(Value* v) {
    if (const auto& memo = userMemo_[valueNumber(v)]) return *memo;
    std::vector<Op*> out;
    for (Op* u : users(v)) {
      if (inlined(u)) {
        if (plan_.keptTop(u)) out.push_back(u);
        for (Op* w : effectiveUsers(u->result())) out.push_back(w);
      } else {
        out.push_back(u);
      }
    }
    std::sort(out.begin(), out.end(), [&](Op* a, Op* b) { return pos(a) < pos(b); });
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return *(userMemo_[valueNumber(v)] = std::move(out));
  }

  template <class F>
  void forEachSucc(int gid, F f) {
    for (Op* m : groups_[size_t(gid)].members)
      for (auto& r : m->results)
        for (Op* u : effectiveUsers(r.get()))
          if (!inlined(u) && groupOf(u) != gid) f(groupOf(u));
  }
  template <class F>
  void forEachPred(int gid, F f) {
    for (Op* m : groups_[size_t(gid)].members)
      for (Value* o : m->operands)
        for (Value* s : sources(o))
          if (groupOf(s->def) != gid) f(groupOf(s->def));
  }

  // The rank of A u B if merging keeps every edge rank-increasing (see the file comment).
  std::optional<int64_t> placement(int a, int b) {
    if (groups_[size_t(a)].rank > groups_[size_t(b)].rank) std::swap(a, b);
    const int64_t ra = groups_[size_t(a)].rank, rb = groups_[size_t(b)].rank;
    bool late = true, early = true;
    forEachSucc(a, [&](int s) { late &= s == b || groups_[size_t(s)].rank > rb; });
    if (late) return rb;
    forEachPred(b, [&](int p) { early &= p == a || groups_[size_t(p)].rank < ra; });
    if (early) return ra;
    return std::nullopt;
  }

  // True when a member of `reader` reads a column sum or a total computed by a member of
  // `sums`: those exist only once every block of their kernel finished.
  bool readsBlockwiseResult(int reader, int sums) {
    for (Op* m : groups_[size_t(reader)].members)
      for (Value* o : m->operands)
        for (Value* s : sources(o))
          if (groupOf(s->def) == sums && s->def->info().category == OpCategory::Reduction &&
              (domainOf(*s->def).kind == DomainKind::Col || domainOf(*s->def).kind == DomainKind::All))
            return true;
    return false;
  }

  // What codegen's row kernel adds column sums and totals to: rows of trailing (contiguous)
  // elements, and float column sums and totals.
  bool blockwiseFit(int gid) const {
    for (const Op* m : groups_[size_t(gid)].members) {
      if (m->info().category != OpCategory::Reduction) continue;
      const DomainKind k = domainOf(*m).kind;
      if ((k == DomainKind::Col || k == DomainKind::All) && !isFloat(m->result()->type.dtype)) return false;
      if (k != DomainKind::Row) continue;
      const Shape& in = m->operands[0]->type.shape;
      std::vector<bool> reduced(in.size(), false);
      for (int64_t a : m->attrInts("axes")) reduced[size_t(a < 0 ? a + int64_t(in.size()) : a)] = true;
      bool seenReduced = false;
      for (size_t d = 0; d < in.size(); ++d) {
        if (in[d] == 1) continue;
        if (!reduced[d] && seenReduced) return false;
        seenReduced |= reduced[d];
      }
    }
    return true;
  }

  // Codegen evaluates a row kernel's row-shaped values (its row outputs, a total's operand) at
  // each row's own position, with that row's reductions in registers: between those
  // reductions and such a value only pointwise ops and reshapes (which keep positions) may
  // stand. A permute or slice on the way would pair one row's reduction with another row's
  // position. (Full-shaped values read a row's reduction through a broadcast, which is right
  // where their order keeps the rows: below.) Inlined ops and views are seen through; a value
  // another kernel stores is read at its own position, which is right whatever its layout.
  //
  // Full-shaped values are evaluated element by element in the order of their own layout,
  // element i with the reductions of row i / r in registers: so between the reductions and
  // such a value no permute may reorder dims either (a per-head norm read through the heads'
  // transpose, Qwen3's and OLMo2's q_norm and k_norm before RoPE, gave each element another
  // row's norm: their logits were off by 20-65% on the GPU). Slices and concats along a row
  // (RoPE's halves) keep each element in its row and stay allowed there.
  bool rowValuesInPlace(int a, int b, int64_t rows, int64_t elements) const {
    struct Item {
      const Value* v;
      bool reordered;  // a position-changing op on the way from the start
      bool full;       // started at a full-shaped value: only dim-reordering permutes count
      auto key() const { return std::tuple(v, reordered, full); }
    };
    std::vector<Item> stack;
    for (int gid : {a, b})
      for (const Op* m : groups_[size_t(gid)].members) {
        const bool reduction = m->info().category == OpCategory::Reduction;
        if (reduction && domainOf(*m).kind == DomainKind::All) stack.push_back({m->operands[0], false, false});
        else if (!reduction)
          for (const auto& r : m->results) {
            if (r->type.numel() == rows && rows != elements) stack.push_back({r.get(), false, false});
            else if (r->type.numel() == elements) stack.push_back({r.get(), false, true});
          }
      }
    std::set<std::tuple<const Value*, bool, bool>> seen;
    while (!stack.empty()) {
      const Item it = stack.back();
      stack.pop_back();
      if (!it.v->def || !seen.insert(it.key()).second) continue;
      const Op& d = *it.v->def;
      const bool inside = !inlined(&d) && (groupOf(&d) == a || groupOf(&d) == b);
      if (d.info().category == OpCategory::Reduction) {
        if (inside && it.reordered) return false;
        continue;
      }
      if (!inside && !inlined(&d) && !isViewOp(d.kind)) continue;  // stored: read at its own position
      const bool moves = it.full ? d.kind == OpKind::Permute && !keepsDimOrder(d.operands[0]->type.shape, d.attrInts("perm"))
                                 : d.info().category != OpCategory::Pointwise && d.kind != OpKind::Reshape;
      for (const Value* o : d.operands) stack.push_back({o, it.reordered || moves, it.full});
    }
    return true;
  }

  bool mergeable(int gid) const {
    const Group& grp = groups_[size_t(gid)];
    return grp.alive && !grp.fixed && !grp.frozen;
  }

  // `forced`: the merged domain when the caller already decided the domains fit.
  bool tryMerge(int producer, int consumer, bool edge, std::optional<Domain> forced = std::nullopt) {
    if (producer == consumer || !mergeable(producer) || !mergeable(consumer)) return false;
    auto dom = forced ? forced : fuseDomains(groups_[size_t(producer)].domain, groups_[size_t(consumer)].domain, edge);
    if (!dom) return false;
    if ((dom->columnSums || dom->rowTotals) &&
        (readsBlockwiseResult(consumer, producer) || readsBlockwiseResult(producer, consumer) ||
         !blockwiseFit(producer) || !blockwiseFit(consumer)))
      return false;
    if (dom->kind == DomainKind::Row && !rowValuesInPlace(producer, consumer, dom->n, dom->n * dom->r)) return false;
    auto rank = placement(producer, consumer);
    if (!rank) return false;
    absorb(consumer, producer, *rank);
    groups_[size_t(consumer)].domain = *dom;
    return true;
  }

  // Group `gone`'s members join group `keep`, which takes rank `rank` (placement's).
  void absorb(int keep, int gone, int64_t rank) {
    Group& k = groups_[size_t(keep)];
    Group& g = groups_[size_t(gone)];
    for (Op* m : g.members) {
      groupOf_[size_t(pos(m))] = keep;
      k.members.push_back(m);
    }
    g.members.clear();
    g.alive = false;
    k.rank = rank;
  }

  // A forward attention whose output O is read by one permute alone (attention_output.h),
  // materialised for a GEMM: the permute joins the flash kernel, which stores O in that
  // layout (codegen/attention_kernel.cpp), instead of a copy kernel reading O back.
  void absorbOutputPermutes() {
    for (auto& owned : g_.ops) {
      Op* op = owned.get();
      if (op->kind != OpKind::Attention || inlined(op)) continue;
      Value* o = op->result(0);
      const auto readers = users(o);
      if (isOutput(o) || readers.size() != 1) continue;
      Op* p = readers.front();
      if (!keepsRows(*p) || inlined(p)) continue;
      const int into = groupOf(op), gone = groupOf(p);
      groups_[size_t(into)].members.push_back(p);
      groups_[size_t(gone)].members.clear();
      groups_[size_t(gone)].alive = false;
      groupOf_[size_t(pos(p))] = into;
    }
  }

  // An attention backward whose dq, dk and dv are read by one kernel alone, which does nothing
  // but assemble them into one result (ir/attention_assembly.h: d(QKV) through permutes and
  // reshapes, dq and dk through RoPE's backward rotation): that kernel's ops join the flash
  // kernel, which stores each gradient where the assembled result holds it
  // (codegen/attention_kernel.cpp). The gradients are then written once, straight into
  // d(QKV), and never read back. Only where the tensor-core templates run the backward
  // (ir/attention_path.h): their stores are the ones that take row strides and rotations.
  void absorbBackwardAssembly() {
    for (auto& owned : g_.ops) {
      Op* att = owned.get();
      if (att->kind != OpKind::AttentionBackward || inlined(att) || !attentionTensorCoreBlocker(*att).empty()) continue;
      const int ga = groupOf(att);
      int gm = -1;
      bool ok = true;
      for (auto& r : att->results) {
        ok &= !isOutput(r.get());
        for (Op* u : effectiveUsers(r.get())) {
          const int g = inlined(u) ? -1 : groupOf(u);
          ok &= g >= 0 && g != ga && (gm < 0 || g == gm);
          gm = g;
        }
      }
      if (!ok || gm < 0 || !mergeable(gm)) continue;
      // The assembling kernel's one result, and nothing in it but the assembly's ops.
      const Group& m = groups_[size_t(gm)];
      const Value* out = nullptr;
      for (Op* member : m.members)
        for (auto& r : member->results) {
          bool external = isOutput(r.get());
          for (Op* u : effectiveUsers(r.get())) external |= inlined(u) || groupOf(u) != gm;
          if (external) ok &= out == nullptr, out = r.get();
        }
      std::vector<const Op*> ops;
      const auto parts = ok && out ? matchAttentionAssembly(out, *att, &ops) : std::nullopt;
      if (!parts) continue;
      // RoPE's tables are read from memory (findBroadcastTables materialises them), not
      // recomputed in the kernel.
      for (const AssemblyPart& p : *parts)
        for (const Value* t : {p.cos, p.sin}) ok &= !t || !t->def || !inlined(t->def);
      for (Op* member : m.members) ok &= std::find(ops.begin(), ops.end(), member) != ops.end();
      for (const Op* op : ops) ok &= inlined(op) || groupOf(op) == gm;
      const auto rank = ok ? placement(ga, gm) : std::nullopt;
      if (rank) absorb(ga, gm, *rank);
    }
  }

  // ---- AdamW: one multi-tensor kernel per layer ---------------------------------------------

  // The ops computing param updates, and the pointwise ops only they read, grouped by
  // updateGroupKey. Walked backwards so every reader is decided before its producer.
  void claimOptimizerUpdates() {
    const StringTable<const Op*> params = g_.paramsByName();
    PtrMap<const Value*, std::string> updateKey;
    // ZeRO-1: a param's update is an all_gather of the rank's new rows. Those rows are computed
    // with the moments' updates, in the group's one kernel, which the all_gather then reads.
    PtrSet<const Op*> gathers;
    for (size_t i = 0; i < g_.outputs.size(); ++i) {
      if (g_.updateOf(i).empty()) continue;
      const std::string key = updateGroupKey(*params.at(g_.updateOf(i)));
      updateKey[g_.outputs[i]] = key;
      if (const Op* d = g_.outputs[i]->def; d && d->kind == OpKind::AllGather) {
        for (size_t k = 0; k < d->operands.size(); ++k)
          if (d->result(int(k)) == g_.outputs[i]) updateKey[d->operands[k]] = key;
        gathers.insert(d);
      }
    }
    // An update that reads a gathered weight (its bf16 copy) runs after the all_gathers: a
    // group of its own.
    for (size_t i = 0; i < g_.outputs.size(); ++i) {
      const Op* d = g_.outputs[i]->def;
      if (g_.updateOf(i).empty() || !d) continue;
      const bool readsGathered = std::any_of(d->operands.begin(), d->operands.end(),
                                             [&](const Value* x) { return x->def && gathers.count(x->def); });
      if (readsGathered) updateKey[g_.outputs[i]] += " after all_gather";
    }
    if (updateKey.empty()) return;
    PtrMap<const Op*, std::string> claim;
    std::map<std::string, std::vector<Op*>> byKey;
    for (size_t p = g_.ops.size(); p-- > 0;) {
      Op* op = g_.ops[p].get();
      if (inlined(op) || isFixed(*op)) continue;
      // An update output joins its group, and so does a pointwise op that only feeds one
      // group; either way every reader must already be in that group (a reader outside
      // would run before the group's rank and break the order).
      std::string key;
      auto upd = updateKey.find(op->result());
      if (upd != updateKey.end()) key = upd->second;
      else if (op->info().category != OpCategory::Pointwise || isOutput(op->result())) continue;
      bool ok = true;
      for (Op* u : effectiveUsers(op->result())) {
        if (gathers.count(u)) continue;  // its rows' all_gather runs after the group
        auto c = claim.find(u);
        ok &= c != claim.end() && (key.empty() || c->second == key);
        if (!ok) break;
        key = c->second;
      }
      if (!ok || key.empty()) continue;
      claim[op] = key;
      byKey[key].push_back(op);
    }
    PtrMap<const Op*, int64_t> gatherRank;  // the latest group each all_gather reads from
    for (auto& [key, ops] : byKey) {
      const int into = groupOf(ops.front());  // the last op in graph order
      Group& grp = groups_[size_t(into)];
      grp.frozen = true;
      grp.domain = Domain{DomainKind::Multi, 0, 1};
      for (size_t k = 1; k < ops.size(); ++k) {
        Group& gone = groups_[size_t(groupOf(ops[k]))];
        gone.alive = false;
        gone.members.clear();
        groupOf_[size_t(pos(ops[k]))] = into;
        grp.members.push_back(ops[k]);
      }
      for (Op* m : grp.members)
        for (auto& r : m->results)
          for (Op* u : effectiveUsers(r.get()))
            if (gathers.count(u)) {
              auto [it, fresh] = gatherRank.try_emplace(u, grp.rank);
              if (!fresh) it->second = std::max(it->second, grp.rank);
            }
    }
    // Its rows' all_gathers, nothing reads (in-place updates), move to the rank of the last
    // group they gather from (a layer's gather may read several: the bf16 copies' and a norm
    // weight's rows): finish() orders a top-level op after a kernel of the same rank.
    for (const auto& [u, rank] : gatherRank) groups_[size_t(groupOf(u))].rank = rank;
  }

  // ---- greedy merging -----------------------------------------------------------------------

  void mergeProducersIntoConsumers() {
    for (auto& owned : g_.ops) {
      Op* op = owned.get();
      if (inlined(op) || isFixed(*op)) continue;
      for (Value* o : op->operands)
        for (Value* s : sources(o)) {
          Op* d = s->def;
          if (inlined(d) || isFixed(*d)) continue;
          if (!tryMerge(groupOf(d), groupOf(op), /*edge=*/true) && op->kind == OpKind::Concat)
            absorbIntoConcat(groupOf(d), op, o);
        }
    }
  }

  // A concat is index math over its own domain: a pointwise group computing whole pieces
  // (possibly through reshapes), read by nothing but concats of one element count, computes
  // its part of that domain in the concats' kernel, so the pieces never exist in memory
  // (backward RoPE of dq, dk + dv into d(QKV); SwiGLU backward into d(H13)). When
  // merge-gemms concatenates the same pieces twice (its K-merge and M-merge orders differ)
  // both concats join one kernel: one launch, each output written once per element.
  void absorbIntoConcat(int producer, Op* concat, Value* piece) {
    if (!mergeable(producer)) return;
    const Group& p = groups_[size_t(producer)];
    const Domain dom{DomainKind::Pointwise, concat->result()->type.numel(), 1};
    if (p.domain.kind != DomainKind::Pointwise || p.domain.n != piece->type.numel()) return;
    std::vector<int> concats;
    for (Op* m : p.members)
      for (auto& r : m->results) {
        if (isOutput(r.get())) return;
        for (Op* u : effectiveUsers(r.get())) {
          if (groupOf(u) == producer) continue;
          if (inlined(u) || u->kind != OpKind::Concat || isFixed(*u) || u->result()->type.numel() != dom.n) return;
          const int c = groupOf(u);
          if (!mergeable(c) || groups_[size_t(c)].domain != dom) return;
          if (std::find(concats.begin(), concats.end(), c) == concats.end()) concats.push_back(c);
        }
      }
    if (concats.empty()) return;
    const int into = groupOf(concat);
    for (int c : concats)
      if (c != into && !tryMerge(c, into, /*edge=*/false, dom) && !tryMerge(into, c, /*edge=*/false, dom)) return;
    tryMerge(producer, groupOf(concat), /*edge=*/true, dom);
  }

  // Groups reading one large value (at least their iteration domain) with equal domains
  // share a kernel, so the value is read once (e.g. RoPE of q and k from one QKV GEMM).
  void mergeSiblings() {
    auto size = [&](int gid) { return groups_[size_t(gid)].domain.n * groups_[size_t(gid)].domain.r; };
    for (auto& owned : g_.ops) {
      if (inlined(owned.get())) continue;
      for (auto& r : owned->results) {
        const int64_t numel = r->type.numel();
        // Only readers whose domain the value covers can share its read: filtered once, so a
        // small value read everywhere (AdamW's step, a norm's weight) costs its readers, not
        // their pairs.
        std::vector<Op*> readers;
        for (Op* u : effectiveUsers(r.get()))
          if (!inlined(u) && !isFixed(*u) && mergeable(groupOf(u)) && numel >= size(groupOf(u))) readers.push_back(u);
        for (size_t i = 0; i < readers.size(); ++i)
          for (size_t j = i + 1; j < readers.size(); ++j) {
            const int a = groupOf(readers[i]), b = groupOf(readers[j]);
            if (a == b || !mergeable(a) || !mergeable(b) || numel < size(a) || numel < size(b)) continue;
            tryMerge(a, b, /*edge=*/false);
          }
      }
    }
  }

  // ---- the embedding gradient inside its update ------------------------------------------

  // A scatter_add whose table (the embedding gradient) is read by one group alone, element
  // for element (its AdamW update: a pointwise or one-shape optimizer group), takes that
  // group as its epilogue: the scatter kernel holds a row's sums in registers and applies the
  // update there, so the dense gradient never exists in memory (it was written once and read
  // once: 82 MB a step at medium batch 16). Runs last: the scatter group has its pointwise
  // producers by then, and the merged group is complete (frozen).
  void fuseScattersIntoConsumers() {
    for (auto& owned : g_.ops) {
      Op* op = owned.get();
      if (op->kind != OpKind::ScatterAdd || inlined(op)) continue;
      const int s = groupOf(op);
      Value* table = op->result();
      const int axis = normalizeAxis(op->attrInt("axis"), table->type.rank(), "scatter_add");
      if (isOutput(table) || op->operands[2]->type.shape[size_t(axis)] > kMaxScatterEpilogueSources) continue;
      const int c = epilogueGroupOf(table, s);
      if (c < 0 || !groups_[size_t(s)].alive || groups_[size_t(s)].frozen) continue;
      auto rank = placement(s, c);
      if (!rank) continue;
      absorb(s, c, *rank);
      groups_[size_t(s)].frozen = true;
    }
  }

  // The group that may read scatter table `table` (of group `scatter`) as its epilogue, or
  // -1: the table is read by one group alone (through inlined ops too); in that group's body
  // (its members and the inlined ops it recomputes) every value computed from the table is a
  // pointwise value of the table's shape; and every result of the group has the table's
  // element count (codegen evaluates them all at the row and columns a warp holds).
  int epilogueGroupOf(Value* table, int scatter) {
    int into = -1;
    for (Op* u : effectiveUsers(table)) {
      if (inlined(u) || isFixed(*u)) return -1;  // a kept view or a GEMM needs the table in memory
      const int gid = groupOf(u);
      if (gid == scatter || (into >= 0 && gid != into)) return -1;
      into = gid;
    }
    if (into < 0 || !groups_[size_t(into)].alive) return -1;
    const Group& grp = groups_[size_t(into)];
    if (grp.fixed || (grp.domain.kind != DomainKind::Pointwise && grp.domain.kind != DomainKind::Multi)) return -1;
    // The body: the members and, through their operands, the inlined ops they recompute.
    std::vector<const Op*> body;
    PtrSet<const Op*> inBody;
    std::vector<const Op*> stack(grp.members.begin(), grp.members.end());
    while (!stack.empty()) {
      const Op* op = stack.back();
      stack.pop_back();
      if (!inBody.insert(op).second) continue;
      body.push_back(op);
      for (const Value* o : op->operands)
        if (o->def && inlined(o->def)) stack.push_back(o->def);
    }
    std::sort(body.begin(), body.end(), [&](const Op* x, const Op* y) { return pos(x) < pos(y); });
    PtrSet<const Value*> fromTable = {table};
    for (const Op* op : body) {
      bool reads = false;
      for (const Value* o : op->operands) reads |= fromTable.count(o) != 0;
      if (!reads) continue;
      if (op->info().category != OpCategory::Pointwise || op->results.size() != 1 ||
          op->result()->type.shape != table->type.shape)
        return -1;
      fromTable.insert(op->result());
    }
    for (Op* m : grp.members)
      for (auto& r : m->results) {
        bool read = isOutput(r.get());
        for (Op* u : effectiveUsers(r.get())) read |= inlined(u) || groupOf(u) != into;
        if (read && r->type.numel() != table->type.numel()) return -1;
      }
    return into;
  }

  Plan finish() {
    for (size_t i = 0; i < plan_.keptTopOps.size(); ++i) plan_.keptTopOps[i] &= plan_.inlinedOps[i];
    std::vector<int> live;
    for (size_t gid = 0; gid < groups_.size(); ++gid)
      if (groups_[gid].alive && !groups_[gid].members.empty()) live.push_back(int(gid));
    // By rank; at equal ranks (a ZeRO-1 group and its all_gathers) kernels first, else as formed.
    std::stable_sort(live.begin(), live.end(), [&](int a, int b) {
      const Group &x = groups_[size_t(a)], &y = groups_[size_t(b)];
      return x.rank != y.rank ? x.rank < y.rank : !x.fixed && y.fixed;
    });
    for (int gid : live) {
      Group& grp = groups_[size_t(gid)];
      if (grp.fixed) {
        plan_.order.push_back({grp.members.front(), -1});
        continue;
      }
      Plan::Kernel k;
      k.members = grp.members;
      std::sort(k.members.begin(), k.members.end(), [&](Op* a, Op* b) { return pos(a) < pos(b); });
      k.domain = grp.domain;
      for (Op* m : k.members)
        for (auto& r : m->results) {
          bool needed = isOutput(r.get());
          for (Op* u : effectiveUsers(r.get())) needed |= inlined(u) || groupOf(u) != gid;
          if (needed) k.results.push_back(r.get());
        }
      if (k.results.empty()) continue;  // dead: nothing outside reads it
      plan_.order.push_back({nullptr, int(plan_.kernels.size())});
      plan_.kernels.push_back(std::move(k));
    }
    plan_.changes = !plan_.kernels.empty();
    for (size_t i = 0; i < plan_.inlinedOps.size(); ++i) plan_.changes |= plan_.inlinedOps[i] && !plan_.keptTopOps[i];
    return std::move(plan_);
  }


  const Graph& g_;
  Plan plan_;
  const GraphNumbering& numbers_;  // plan_'s
  const UseLists uses_;
  // By op number: kept in memory whatever chooseInlined would say. By value number: a graph
  // output.
  std::vector<char> demoted_, output_;
  std::vector<std::optional<std::vector<Value*>>> srcMemo_;  // by value number
  std::vector<std::optional<std::vector<Op*>>> userMemo_;    // by value number
  std::vector<int> groupOf_;
  std::vector<Group> groups_;
};

}  // namespace

Plan planFusion(const Graph& g) { return Planner(g).run(); }

}  // namespace fusec::fusion
