// Canonicalization: local rewrites applied to a fixed point in one forward sweep per graph
// (operands are canonical before their users are visited; each op is rewritten until no
// rule applies; a second sweep runs only as a check).
//
//   constant folding   a pointwise op whose operands are all `constant` splats becomes a
//                      constant; the value is computed by the reference interpreter on
//                      rank-0 tensors, so it matches its semantics bit for bit. Not folded:
//                      int division by zero, int operands beyond +-2^31, casts of
//                      NaN/inf/out-of-range values to int or bool, NaN results, and results
//                      a `constant` of the result type cannot reproduce exactly.
//   identities         x*1, 1*x, x+0, 0+x, x-0, x/1 -> x (the constant must have x's type);
//                      neg(neg x) -> x; cast to x's own type -> x; stop_gradient(x) -> x
//                      (it only matters to autodiff, which runs before canonicalize);
//                      cast(cast(x)) -> cast(x) (or x when back to x's dtype) when the inner
//                      cast is a lossless widening (bf16->f32, f16->f32, i32->i64, bool->*).
//   layout             reshape/broadcast to the same type -> x; reshape(reshape x) ->
//                      reshape x; broadcast(broadcast x) -> broadcast x; identity permute ->
//                      x; permute(permute x) -> one permute (x for identity); whole-axis
//                      step-1 slice -> x; reshape/permute/broadcast/slice of a constant ->
//                      a constant of the new type; a permute that only moves size-1 dims ->
//                      reshape; sum/mean/reduce_max/reduce_min over size-1 axes -> reshape.
//   concat/slice       (what slice VJPs and merge-gemms leave behind)
//                      slice of a concat inside one operand -> that operand (or a slice of
//                      it); a slice along the last axis of a reshape of a concat that keeps
//                      the last dim -> reshape of the slice of the concat; concat of adjacent step-1 slices of one x, in order -> x (or one
//                      slice of x); add of two concats along one axis where, at every
//                      position, one side is a zero splat -> one concat of the other
//                      sides' pieces (concat(x, 0) + concat(0, y) -> concat(x, y));
//                      concat along the last axis (rank > 2) of reshapes -> reshape of one
//                      [rows, n] concat of the pieces as matrices, so merge-gemms' [B,T,n]
//                      and [B*T,n] concats of one set of pieces become one concat after cse
//                      (the other is a free contiguous view).
//   select             select(c, x, x) -> x.
//
// A replaced value's uses move to its replacement. Ops that lose their last use through a
// rewrite are erased (transitively); ops that were dead before are left for DCE. `input` and
// `param` ops are never erased. Kernel bodies are canonicalized recursively.
#include <algorithm>
#include <bit>
#include <cmath>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "ir/interpreter.h"
#include "ir/type_rules.h"
#include "passes/pass.h"

namespace fusec {
namespace {

bool isSignature(const Op& op) { return op.kind == OpKind::Input || op.kind == OpKind::Param; }

const Op* constDef(const Value* v) {
  return v->def && v->def->kind == OpKind::Constant ? v->def : nullptr;
}

// `v` is a constant splat whose value attribute is exactly `c` (0 matches -0 too).
bool isSplatOf(const Value* v, double c) {
  const Op* d = constDef(v);
  return d && d->attrFloat("value") == c;
}

std::unique_ptr<Op> newOp(OpKind kind, std::vector<Value*> operands, const Type& resultType) {
  auto op = makeOp(kind);
  op->operands = std::move(operands);
  auto r = std::make_unique<Value>();
  r->type = resultType;
  r->def = op.get();
  r->index = 0;
  op->results.push_back(std::move(r));
  return op;
}

std::unique_ptr<Op> newConstant(double value, const Type& t) {
  auto op = newOp(OpKind::Constant, {}, t);
  op->setAttr("value", value);
  return op;
}

// The new op type-checks and infers exactly its declared result types.
bool typeChecks(const Op& op) {
  try {
    std::vector<Type> in, declared;
    for (Value* v : op.operands) in.push_back(v->type);
    for (auto& r : op.results) declared.push_back(r->type);
    return inferResultTypes(op.info(), in, op.attrs, declared, op.body.get()) == declared;
  } catch (const Error&) {
    return false;
  }
}

// A cast from -> to that is exact for every value of `from`.
bool losslessWidening(DType from, DType to) {
  if (from == DType::boolean) return to != DType::boolean;
  return (from == DType::bf16 && to == DType::f32) || (from == DType::f16 && to == DType::f32) ||
         (from == DType::i32 && to == DType::i64);
}

bool fitsTarget(double v, DType to) {
  if (to == DType::i32) return v > -2147483649.0 && v < 2147483648.0;
  if (to == DType::i64) return v > -9.2e18 && v < 9.2e18;
  if (to == DType::boolean) return std::isfinite(v);
  return true;  // float targets: rounding, inf and NaN are all well defined
}

bool sameBits(const HostTensor& a, const HostTensor& b) {
  if (a.type != b.type) return false;
  if (isFloat(a.type.dtype)) return std::bit_cast<uint32_t>(a.f.at(0)) == std::bit_cast<uint32_t>(b.f.at(0));
  return a.i.at(0) == b.i.at(0);
}

// Folds a pointwise op over constant splats by interpreting it on rank-0 tensors.
std::optional<double> foldPointwise(const Op& op) {
  try {
    Module tmp;
    Graph& g = tmp.add("fold");
    std::vector<Value*> args;
    for (Value* v : op.operands) {
      Op* c = g.append(newConstant(constDef(v)->attrFloat("value"), Type{v->type.dtype, {}}));
      args.push_back(c->result());
    }
    // The operands' values as the interpreter sees them (rounded to their dtypes).
    g.outputs = args;
    std::vector<HostTensor> in = interpret(g, {});
    for (size_t i = 0; i < in.size(); ++i) {
      double v = in[i].get(0);
      if (!isFloat(in[i].type.dtype) && std::fabs(v) > 2147483648.0) return std::nullopt;
    }
    const DType outType = op.result()->type.dtype;
    if (op.kind == OpKind::Div && !isFloat(outType) && in.at(1).get(0) == 0) return std::nullopt;
    if (op.kind == OpKind::Cast && !fitsTarget(in.at(0).get(0), outType)) return std::nullopt;

    Op* f = g.append(newOp(op.kind, args, Type{outType, {}}));
    g.outputs = {f->result()};
    HostTensor r = interpret(g, {}).at(0);
    double value = r.get(0);
    if (std::isnan(value)) return std::nullopt;

    // The folded constant must reproduce the result exactly.
    Module check;
    Graph& cg = check.add("check");
    cg.outputs = {cg.append(newConstant(value, Type{outType, {}}))->result()};
    if (!sameBits(interpret(cg, {}).at(0), r)) return std::nullopt;
    return value;
  } catch (const std::exception&) {  // Error, or anything else the interpreter may throw
    return std::nullopt;
  }
}

std::optional<std::vector<int64_t>> normalizedPerm(const std::vector<int64_t>& perm) {
  const int64_t n = int64_t(perm.size());
  std::vector<int64_t> p(perm.size());
  std::vector<bool> seen(perm.size(), false);
  for (size_t i = 0; i < perm.size(); ++i) {
    int64_t a = perm[i] < 0 ? perm[i] + n : perm[i];
    if (a < 0 || a >= n || seen[size_t(a)]) return std::nullopt;
    seen[size_t(a)] = true;
    p[i] = a;
  }
  return p;
}

bool isIdentityPerm(const std::vector<int64_t>& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != int64_t(i)) return false;
  return true;
}

// The pieces of a concat along its (normalized) axis, as [start, end) ranges.
struct Piece {
  Value* v;
  int64_t start, end;
  bool zero;
};
std::vector<Piece> piecesOf(const Op& concat, int ax) {
  std::vector<Piece> ps;
  int64_t at = 0;
  for (Value* v : concat.operands) {
    int64_t len = v->type.shape[size_t(ax)];
    ps.push_back({v, at, at + len, isSplatOf(v, 0)});
    at += len;
  }
  return ps;
}

int concatAxis(const Op& op) { return normalizeAxis(op.attrInt("axis"), op.result()->type.rank(), "concat"); }

// add(concat(...), concat(...)) along one axis where every non-zero piece of one side lies
// over zero pieces of the other: the non-zero pieces in order, with zero pieces reused
// from either side where they fit exactly (never new constants). Empty when it does not apply.
std::vector<Value*> addOfZeroPadded(const Op& ca, const Op& cb) {
  const int ax = concatAxis(ca);
  if (concatAxis(cb) != ax) return {};
  auto pa = piecesOf(ca, ax), pb = piecesOf(cb, ax);
  auto allZero = [](const std::vector<Piece>& ps, int64_t s, int64_t e) {
    for (const Piece& p : ps)
      if (p.start < e && p.end > s && !p.zero) return false;
    return true;
  };
  auto at = [](const std::vector<Piece>& ps, int64_t pos) -> const Piece& {
    for (const Piece& p : ps)
      if (p.start <= pos && pos < p.end) return p;
    return ps.back();
  };
  std::vector<Value*> out;
  const int64_t total = pa.back().end;
  for (int64_t pos = 0; pos < total;) {
    const Piece &a = at(pa, pos), &b = at(pb, pos);
    const Piece* take = nullptr;
    if (!a.zero) take = a.start == pos && allZero(pb, pos, a.end) ? &a : nullptr;
    else if (!b.zero) take = b.start == pos && allZero(pa, pos, b.end) ? &b : nullptr;
    else {
      const int64_t end = std::min(a.end, b.end);
      take = a.start == pos && a.end == end ? &a : b.start == pos && b.end == end ? &b : nullptr;
    }
    if (!take) return {};
    out.push_back(take->v);
    pos = take->end;
  }
  return out;
}

// What to do with one op: nothing, replace its result by an existing value, or replace the
// op by a new one (which is then canonicalized in turn).
struct Rewrite {
  Value* existing = nullptr;
  std::unique_ptr<Op> replacement;
  std::vector<std::unique_ptr<Op>> before;  // new ops the replacement reads, placed first
};

Rewrite useExisting(Value* v) { return Rewrite{v, nullptr, {}}; }

Rewrite useNew(std::unique_ptr<Op> op) {
  if (!typeChecks(*op)) return {};
  return Rewrite{nullptr, std::move(op), {}};
}

// concat(a1, a2, ...) along the last axis of a rank > 2 result ->
// reshape(concat(reshape(a1), ...)) with the pieces as [rows, n_i] matrices (a reshape of a
// reshape folds to one): rows of a last-axis concat stay rows, so one 2-D concat serves every
// leading shape (merge-gemms' [B,T,n] and [B*T,n] concats of one set of pieces then meet in
// cse). Rank 2 is the fixed point.
Rewrite concatOfReshapes(const Op& op) {
  const Type& t = op.result()->type;
  if (t.rank() <= 2 || concatAxis(op) != t.rank() - 1 || op.operands.size() < 2) return {};
  const int64_t rows = t.numel() / std::max<int64_t>(t.shape.back(), 1);
  Rewrite rw;
  std::vector<Value*> pieces;
  for (Value* v : op.operands) {
    Value* x = v->def && v->def->kind == OpKind::Reshape ? v->def->operands[0] : v;
    const Type flat{t.dtype, {rows, v->type.shape.back()}};
    if (x->type == flat) {
      pieces.push_back(x);
      continue;
    }
    rw.before.push_back(newOp(OpKind::Reshape, {x}, flat));
    pieces.push_back(rw.before.back()->result());
  }
  auto cat = newOp(OpKind::Concat, pieces, Type{t.dtype, {rows, t.shape.back()}});
  cat->setAttr("axis", int64_t(1));
  if (!typeChecks(*cat)) return {};
  rw.replacement = newOp(OpKind::Reshape, {cat->result()}, t);
  if (!typeChecks(*rw.replacement)) return {};
  rw.before.push_back(std::move(cat));
  return rw;
}

Rewrite rewrite(const Op& op) {
  if (op.numResults() != 1 || op.body || op.operands.empty()) return {};
  const Type& t = op.result()->type;
  Value* a = op.operands[0];
  Value* b = op.operands.size() > 1 ? op.operands[1] : nullptr;
  const Op* aDef = a->def;

  if (op.info().category == OpCategory::Pointwise) {
    bool allConst = true;
    for (Value* v : op.operands) allConst = allConst && constDef(v);
    if (allConst)
      if (auto v = foldPointwise(op)) return useNew(newConstant(*v, t));
  }

  switch (op.kind) {
    case OpKind::Mul:
      if (a->type == t && b->type == t && isSplatOf(b, 1)) return useExisting(a);
      if (a->type == t && b->type == t && isSplatOf(a, 1)) return useExisting(b);
      break;
    case OpKind::Add:
      if (a->type == t && b->type == t && isSplatOf(b, 0)) return useExisting(a);
      if (a->type == t && b->type == t && isSplatOf(a, 0)) return useExisting(b);
      if (aDef && aDef->kind == OpKind::Concat && b->def && b->def->kind == OpKind::Concat && a->type == t &&
          b->type == t) {
        std::vector<Value*> parts = addOfZeroPadded(*aDef, *b->def);
        if (parts.size() == 1) return useExisting(parts[0]);
        if (!parts.empty()) {
          auto n = newOp(OpKind::Concat, parts, t);
          n->setAttr("axis", int64_t(concatAxis(*aDef)));
          return useNew(std::move(n));
        }
      }
      break;
    case OpKind::Select:
      if (op.operands[1] == op.operands[2] && op.operands[1]->type == t) return useExisting(op.operands[1]);
      break;
    case OpKind::Sum: case OpKind::Mean: case OpKind::RMax: case OpKind::RMin: {
      bool unit = true;
      for (int64_t ax : op.attrInts("axes")) unit = unit && a->type.shape[size_t(normalizeAxis(ax, a->type.rank(), "reduce"))] == 1;
      if (unit && a->type.dtype == t.dtype) return a->type == t ? useExisting(a) : useNew(newOp(OpKind::Reshape, {a}, t));
      // keepdim = true is a view of keepdim = false: one form, so that CSE meets the two
      // spellings of one reduction (cross-entropy's forward log-sum-exp and its backward's
      // softmax denominator, one pass over the logits each otherwise).
      if (op.attrBool("keepdim")) {
        Shape kept;
        const auto& axes = op.attrInts("axes");
        for (int d = 0; d < a->type.rank(); ++d)
          if (std::none_of(axes.begin(), axes.end(), [&](int64_t x) { return normalizeAxis(x, a->type.rank(), "reduce") == d; }))
            kept.push_back(a->type.shape[size_t(d)]);
        auto flat = newOp(op.kind, {a}, Type{t.dtype, kept});
        flat->setAttr("axes", axes);
        if (!typeChecks(*flat)) break;
        Rewrite rw;
        rw.replacement = newOp(OpKind::Reshape, {flat->result()}, t);
        if (!typeChecks(*rw.replacement)) break;
        rw.before.push_back(std::move(flat));
        return rw;
      }
      break;
    }
    case OpKind::Concat: {
      if (op.operands.size() == 1 && a->type == t) return useExisting(a);
      if (Rewrite rw = concatOfReshapes(op); rw.replacement) return rw;
      // Adjacent step-1 slices of one value along the concat axis, in order.
      const int ax = concatAxis(op);
      Value* src = nullptr;
      int64_t first = 0, next = -1;
      for (Value* v : op.operands) {
        const Op* d = v->def;
        if (!d || d->kind != OpKind::Slice || d->attrInt("step") != 1 ||
            normalizeAxis(d->attrInt("axis"), v->type.rank(), "slice") != ax)
          return {};
        if (!src) { src = d->operands[0]; first = d->attrInt("start"); next = first; }
        if (d->operands[0] != src || d->attrInt("start") != next) return {};
        next = d->attrInt("end");
      }
      if (src->type == t) return useExisting(src);
      auto n = newOp(OpKind::Slice, {src}, t);
      n->setAttr("axis", int64_t(ax));
      n->setAttr("start", first);
      n->setAttr("end", next);
      return useNew(std::move(n));
    }
    case OpKind::Sub:
      if (a->type == t && b->type == t && isSplatOf(b, 0)) return useExisting(a);
      break;
    case OpKind::Div:
      if (a->type == t && b->type == t && isSplatOf(b, 1)) return useExisting(a);
      break;
    case OpKind::Neg:
      if (aDef && aDef->kind == OpKind::Neg && t.dtype != DType::boolean && aDef->operands[0]->type == t)
        return useExisting(aDef->operands[0]);
      break;
    case OpKind::StopGradient: return useExisting(a);
    case OpKind::Cast:
      if (a->type == t) return useExisting(a);
      if (aDef && aDef->kind == OpKind::Cast) {
        Value* x = aDef->operands[0];
        if (losslessWidening(x->type.dtype, a->type.dtype)) {
          if (x->type == t) return useExisting(x);
          return useNew(newOp(OpKind::Cast, {x}, t));
        }
      }
      break;
    case OpKind::Reshape:
      if (a->type == t) return useExisting(a);
      if (aDef && aDef->kind == OpKind::Reshape) return useNew(newOp(OpKind::Reshape, {aDef->operands[0]}, t));
      if (constDef(a)) return useNew(newConstant(aDef->attrFloat("value"), t));
      break;
    case OpKind::Broadcast:
      if (a->type == t) return useExisting(a);
      if (aDef && aDef->kind == OpKind::Broadcast)
        return useNew(newOp(OpKind::Broadcast, {aDef->operands[0]}, t));
      if (constDef(a)) return useNew(newConstant(aDef->attrFloat("value"), t));
      break;
    case OpKind::Permute: {
      auto q = normalizedPerm(op.attrInts("perm"));
      if (!q) break;
      if (isIdentityPerm(*q) && a->type == t) return useExisting(a);
      {  // only size-1 dims move: the data order is unchanged
        int64_t last = -1;
        bool ordered = true;
        for (int64_t d : *q) {
          if (a->type.shape[size_t(d)] == 1) continue;
          ordered = ordered && d > last;
          last = d;
        }
        if (ordered && !isIdentityPerm(*q)) return useNew(newOp(OpKind::Reshape, {a}, t));
      }
      if (constDef(a)) return useNew(newConstant(aDef->attrFloat("value"), t));
      if (aDef && aDef->kind == OpKind::Permute) {
        auto p = normalizedPerm(aDef->attrInts("perm"));
        if (!p || p->size() != q->size()) break;
        // x.permute(p).permute(q) == x.permute(r) with r[i] = p[q[i]]
        std::vector<int64_t> r(q->size());
        for (size_t i = 0; i < r.size(); ++i) r[i] = (*p)[size_t((*q)[i])];
        Value* x = aDef->operands[0];
        if (isIdentityPerm(r) && x->type == t) return useExisting(x);
        auto n = newOp(OpKind::Permute, {x}, t);
        n->setAttr("perm", r);
        return useNew(std::move(n));
      }
      break;
    }
    case OpKind::Slice:
      if (op.attrInt("step") == 1 && a->type == t) return useExisting(a);
      if (constDef(a)) return useNew(newConstant(aDef->attrFloat("value"), t));
      if (aDef && aDef->kind == OpKind::Concat && op.attrInt("step") == 1 &&
          normalizeAxis(op.attrInt("axis"), a->type.rank(), "slice") == concatAxis(*aDef)) {
        const int ax = concatAxis(*aDef);
        const int64_t s = op.attrInt("start"), e = op.attrInt("end");
        for (const Piece& p : piecesOf(*aDef, ax)) {
          if (s < p.start || e > p.end) continue;
          if (p.v->type == t) return useExisting(p.v);
          auto n = newOp(OpKind::Slice, {p.v}, t);
          n->setAttr("axis", int64_t(ax));
          n->setAttr("start", s - p.start);
          n->setAttr("end", e - p.start);
          return useNew(std::move(n));
        }
      }
      // Along the last axis of a reshape of a concat that only regroups the leading dims: the
      // reshape of the same slice of the concat, which the rule above then resolves (the pair
      // swaps of rope's VJP, after concatOfReshapes made their concats 2-D). Only over a
      // concat: a slice of a reshape of anything else stays, for the adjacent-slices rule.
      if (aDef && aDef->kind == OpKind::Reshape && t.rank() >= 1 &&
          normalizeAxis(op.attrInt("axis"), a->type.rank(), "slice") == a->type.rank() - 1) {
        Value* x = aDef->operands[0];
        if (x->def && x->def->kind == OpKind::Concat && x->type.rank() >= 1 &&
            x->type.shape.back() == a->type.shape.back()) {
          Shape xs = x->type.shape;
          xs.back() = t.shape.back();
          auto sl = newOp(OpKind::Slice, {x}, Type{t.dtype, xs});
          sl->setAttr("axis", int64_t(x->type.rank() - 1));
          for (const char* k : {"start", "end", "step"}) sl->setAttr(k, op.attrInt(k));
          if (!typeChecks(*sl)) return {};
          Rewrite rw;
          rw.replacement = newOp(OpKind::Reshape, {sl->result()}, t);
          if (!typeChecks(*rw.replacement)) return {};
          rw.before.push_back(std::move(sl));
          return rw;
        }
      }
      break;
    default:
      break;
  }
  return {};
}

// One forward sweep over `g`; returns whether anything changed.
bool sweep(Graph& g);

bool canonicalizeGraph(Graph& g) {
  bool changed = false;
  for (int i = 0; i < 16; ++i) {
    bool c = sweep(g);
    changed |= c;
    if (!c) break;
  }
  return changed;
}

bool sweep(Graph& g) {
  bool changed = false;
  std::unordered_map<Value*, int> uses;
  for (auto& op : g.ops)
    for (Value* v : op->operands) ++uses[v];
  for (Value* v : g.outputs) ++uses[v];

  std::unordered_map<Value*, Value*> repl;  // replaced value -> its replacement
  auto resolve = [&](Value* v) {
    for (auto it = repl.find(v); it != repl.end(); it = repl.find(v)) v = it->second;
    return v;
  };
  // Dropped ops stay allocated until the end so that no new Value reuses the address of a
  // replaced one (the maps are keyed by address).
  std::vector<std::unique_ptr<Op>> graveyard;
  std::unordered_set<const Op*> erased;  // kept ops that lost their last use
  // Drops one use of `v`; an op all of whose results lose their last use is erased, and
  // so on up the chain.
  auto release = [&](Value* v) {
    std::vector<Value*> stack{v};
    while (!stack.empty()) {
      Value* x = stack.back();
      stack.pop_back();
      if (--uses[x] > 0) continue;
      Op* d = x->def;
      if (!d || isSignature(*d) || erased.count(d)) continue;
      bool allDead = true;
      for (auto& r : d->results) allDead = allDead && uses[r.get()] <= 0;
      if (!allDead) continue;
      erased.insert(d);
      for (Value* o : d->operands) stack.push_back(o);
    }
  };

  std::vector<std::unique_ptr<Op>> out;
  out.reserve(g.ops.size());
  for (auto& slot : g.ops) {
    std::unique_ptr<Op> cur = std::move(slot);
    for (Value*& v : cur->operands) v = resolve(v);
    if (cur->body) changed |= canonicalizeGraph(*cur->body);
    while (true) {
      Rewrite rw = rewrite(*cur);
      if (!rw.existing && !rw.replacement) break;
      changed = true;
      Value* r = cur->result(0);
      Value* to = rw.existing;
      if (rw.replacement) {
        rw.replacement->loc = cur->loc;
        to = rw.replacement->result(0);
        to->name = r->name;
        for (Value* o : rw.replacement->operands) ++uses[o];
        for (auto& pre : rw.before) {
          pre->loc = cur->loc;
          for (Value* o : pre->operands) ++uses[o];
          out.push_back(std::move(pre));
        }
      }
      repl[r] = to;
      uses[to] += uses[r];
      uses[r] = 0;
      for (Value* o : cur->operands) release(o);
      graveyard.push_back(std::move(cur));
      if (!rw.replacement) break;
      cur = std::move(rw.replacement);
    }
    if (cur) out.push_back(std::move(cur));
  }
  for (Value*& v : g.outputs) v = resolve(v);
  g.ops = std::move(out);
  if (!erased.empty()) g.eraseIf([&](Op* op) { return erased.count(op) != 0; });
  return changed;
}

}  // namespace

std::unique_ptr<Pass> createCanonicalizePass() { return std::make_unique<FunctionPass>("canonicalize", &canonicalizeGraph); }

}  // namespace fusec
