// Canonicalization: local rewrites applied to a fixed point in one forward sweep per graph
// (operands are canonical before their users are visited; each op is rewritten until no
// pattern applies; a second sweep runs only as a check). Each rewrite is a named pattern of
// the table in patterns() below (what fires is counted: --pass-stats; --disable-pattern
// switches one off); the rules by family:
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
#include <array>
#include <bit>
#include <cmath>
#include <iostream>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "ir/interpreter.h"
#include "ir/numbering.h"
#include "ir/strided_view.h"
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

// ---- The patterns: each a named rewrite of one op (an empty Rewrite: no match) -------------
// `a` and `b` are the first two operands, `t` the result type; rewrite() checks that the op
// has one result, no body and operands before any pattern sees it.
#define FUSEC_PATTERN(fn) Rewrite fn(const Op& op, Value* a, Value* b, const Type& t)
#define FUSEC_UNUSED_ARGS (void)op, (void)a, (void)b, (void)t

FUSEC_PATTERN(foldConstant) {
  FUSEC_UNUSED_ARGS;
  for (Value* v : op.operands)
    if (!constDef(v)) return {};
  if (auto v = foldPointwise(op)) return useNew(newConstant(*v, t));
  return {};
}
// x op c -> x where c is a splat of the op's identity on the right (and c op x when the op
// commutes): x*1, 1*x, x+0, 0+x, x-0, x/1; the operands and the result of one type.
template <int Identity, bool Commutes>
FUSEC_PATTERN(byIdentity) {
  FUSEC_UNUSED_ARGS;
  if (a->type != t || b->type != t) return {};
  if (isSplatOf(b, Identity)) return useExisting(a);
  if (Commutes && isSplatOf(a, Identity)) return useExisting(b);
  return {};
}
FUSEC_PATTERN(addZeroPaddedConcats) {
  FUSEC_UNUSED_ARGS;
  const Op* aDef = a->def;
  if (!aDef || aDef->kind != OpKind::Concat || !b->def || b->def->kind != OpKind::Concat || a->type != t || b->type != t)
    return {};
  std::vector<Value*> parts = addOfZeroPadded(*aDef, *b->def);
  if (parts.size() == 1) return useExisting(parts[0]);
  if (parts.empty()) return {};
  auto n = newOp(OpKind::Concat, parts, t);
  n->setAttr("axis", int64_t(concatAxis(*aDef)));
  return useNew(std::move(n));
}
FUSEC_PATTERN(selectSame) {
  FUSEC_UNUSED_ARGS;
  if (op.operands[1] == op.operands[2] && op.operands[1]->type == t) return useExisting(op.operands[1]);
  return {};
}
FUSEC_PATTERN(reduceUnitAxes) {
  FUSEC_UNUSED_ARGS;
  bool unit = true;
  for (int64_t ax : op.attrInts("axes")) unit = unit && a->type.shape[size_t(normalizeAxis(ax, a->type.rank(), "reduce"))] == 1;
  if (unit && a->type.dtype == t.dtype) return a->type == t ? useExisting(a) : useNew(newOp(OpKind::Reshape, {a}, t));
  return {};
}
// keepdim = true is a view of keepdim = false: one form, so that CSE meets the two spellings of
// one reduction (cross-entropy's forward log-sum-exp and its backward's softmax denominator,
// one pass over the logits each otherwise).
FUSEC_PATTERN(reduceKeepdimAsReshape) {
  FUSEC_UNUSED_ARGS;
  if (!op.attrBool("keepdim")) return {};
  Shape kept;
  const auto& axes = op.attrInts("axes");
  for (int d = 0; d < a->type.rank(); ++d)
    if (std::none_of(axes.begin(), axes.end(), [&](int64_t x) { return normalizeAxis(x, a->type.rank(), "reduce") == d; }))
      kept.push_back(a->type.shape[size_t(d)]);
  auto flat = newOp(op.kind, {a}, Type{t.dtype, kept});
  flat->setAttr("axes", axes);
  if (!typeChecks(*flat)) return {};
  Rewrite rw;
  rw.replacement = newOp(OpKind::Reshape, {flat->result()}, t);
  if (!typeChecks(*rw.replacement)) return {};
  rw.before.push_back(std::move(flat));
  return rw;
}
FUSEC_PATTERN(concatOfOne) {
  FUSEC_UNUSED_ARGS;
  if (op.operands.size() == 1 && a->type == t) return useExisting(a);
  return {};
}
FUSEC_PATTERN(concatOfReshapesPattern) {
  FUSEC_UNUSED_ARGS;
  return concatOfReshapes(op);
}
// Adjacent step-1 slices of one value along the concat axis, in order.
FUSEC_PATTERN(concatOfAdjacentSlices) {
  FUSEC_UNUSED_ARGS;
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
FUSEC_PATTERN(negNeg) {
  FUSEC_UNUSED_ARGS;
  const Op* aDef = a->def;
  if (aDef && aDef->kind == OpKind::Neg && t.dtype != DType::boolean && aDef->operands[0]->type == t)
    return useExisting(aDef->operands[0]);
  return {};
}
FUSEC_PATTERN(dropStopGradient) {
  FUSEC_UNUSED_ARGS;
  return useExisting(a);
}
// reshape, broadcast and cast to the operand's own type, slice of step 1 to it.
FUSEC_PATTERN(toSameType) {
  FUSEC_UNUSED_ARGS;
  if (a->type != t || (op.kind == OpKind::Slice && op.attrInt("step") != 1)) return {};
  return useExisting(a);
}
FUSEC_PATTERN(castOfWideningCast) {
  FUSEC_UNUSED_ARGS;
  const Op* aDef = a->def;
  if (!aDef || aDef->kind != OpKind::Cast) return {};
  Value* x = aDef->operands[0];
  if (!losslessWidening(x->type.dtype, a->type.dtype)) return {};
  if (x->type == t) return useExisting(x);
  return useNew(newOp(OpKind::Cast, {x}, t));
}
// cast(permute x) -> permute(cast x): the cast reads x in its own order (a coalesced
// pointwise kernel, or none where a GEMM folds the permute as a transpose) instead of
// materialising the transpose. Autocast's weight casts are this: cast(t(w)).
FUSEC_PATTERN(castOfPermute) {
  FUSEC_UNUSED_ARGS;
  const Op* aDef = a->def;
  if (!aDef || aDef->kind != OpKind::Permute) return {};
  Value* x = aDef->operands[0];
  auto cast = newOp(OpKind::Cast, {x}, Type{t.dtype, x->type.shape});
  if (!typeChecks(*cast)) return {};
  Rewrite rw;
  rw.replacement = newOp(OpKind::Permute, {cast->result()}, t);
  rw.replacement->setAttr("perm", aDef->attrInts("perm"));
  if (!typeChecks(*rw.replacement)) return {};
  rw.before.push_back(std::move(cast));
  return rw;
}
// reshape(reshape x) and broadcast(broadcast x): one op of the outer kind over x.
FUSEC_PATTERN(viewOfSameView) {
  FUSEC_UNUSED_ARGS;
  const Op* aDef = a->def;
  if (!aDef || aDef->kind != op.kind) return {};
  return useNew(newOp(op.kind, {aDef->operands[0]}, t));
}
// reshape, broadcast, permute or slice of a splat: a splat of the new type.
FUSEC_PATTERN(viewOfConstant) {
  FUSEC_UNUSED_ARGS;
  if (!constDef(a)) return {};
  return useNew(newConstant(a->def->attrFloat("value"), t));
}
FUSEC_PATTERN(permuteIdentity) {
  FUSEC_UNUSED_ARGS;
  auto q = normalizedPerm(op.attrInts("perm"));
  if (q && isIdentityPerm(*q) && a->type == t) return useExisting(a);
  return {};
}
// A permute that only moves size-1 dims leaves the data order as it is.
FUSEC_PATTERN(permuteOfUnitDimsAsReshape) {
  FUSEC_UNUSED_ARGS;
  auto q = normalizedPerm(op.attrInts("perm"));
  if (!q || isIdentityPerm(*q) || !keepsDimOrder(a->type.shape, *q)) return {};
  return useNew(newOp(OpKind::Reshape, {a}, t));
}
FUSEC_PATTERN(permuteOfPermute) {
  FUSEC_UNUSED_ARGS;
  const Op* aDef = a->def;
  auto q = normalizedPerm(op.attrInts("perm"));
  if (!q || !aDef || aDef->kind != OpKind::Permute) return {};
  auto p = normalizedPerm(aDef->attrInts("perm"));
  if (!p || p->size() != q->size()) return {};
  // x.permute(p).permute(q) == x.permute(r) with r[i] = p[q[i]]
  std::vector<int64_t> r(q->size());
  for (size_t i = 0; i < r.size(); ++i) r[i] = (*p)[size_t((*q)[i])];
  Value* x = aDef->operands[0];
  if (isIdentityPerm(r) && x->type == t) return useExisting(x);
  auto n = newOp(OpKind::Permute, {x}, t);
  n->setAttr("perm", r);
  return useNew(std::move(n));
}
FUSEC_PATTERN(sliceOfConcat) {
  FUSEC_UNUSED_ARGS;
  const Op* aDef = a->def;
  if (!aDef || aDef->kind != OpKind::Concat || op.attrInt("step") != 1 ||
      normalizeAxis(op.attrInt("axis"), a->type.rank(), "slice") != concatAxis(*aDef))
    return {};
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
  return {};
}
// Along the last axis of a reshape of a concat that only regroups the leading dims: the
// reshape of the same slice of the concat, which slice-of-concat then resolves (the pair swaps
// of rope's VJP, after concat-of-reshapes made their concats 2-D). Only over a concat: a slice
// of a reshape of anything else stays, for concat-of-adjacent-slices.
FUSEC_PATTERN(sliceOfReshapedConcat) {
  FUSEC_UNUSED_ARGS;
  const Op* aDef = a->def;
  if (!aDef || aDef->kind != OpKind::Reshape || t.rank() < 1 ||
      normalizeAxis(op.attrInt("axis"), a->type.rank(), "slice") != a->type.rank() - 1)
    return {};
  Value* x = aDef->operands[0];
  if (!x->def || x->def->kind != OpKind::Concat || x->type.rank() < 1 || x->type.shape.back() != a->type.shape.back())
    return {};
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
#undef FUSEC_PATTERN
#undef FUSEC_UNUSED_ARGS

struct Pattern {
  const char* name;
  std::vector<OpKind> kinds;  // the ops it applies to; empty: every pointwise op
  Rewrite (*apply)(const Op&, Value*, Value*, const Type&);
};

// In the order they are tried on an op: the first that matches rewrites it.
const std::vector<Pattern>& patterns() {
  using K = OpKind;
  static const std::vector<Pattern> all = {
      {"fold-constant", {}, foldConstant},
      {"mul-by-one", {K::Mul}, byIdentity<1, true>},
      {"add-zero", {K::Add}, byIdentity<0, true>},
      {"add-zero-padded-concats", {K::Add}, addZeroPaddedConcats},
      {"select-same", {K::Select}, selectSame},
      {"reduce-unit-axes", {K::Sum, K::Mean, K::RMax, K::RMin}, reduceUnitAxes},
      {"reduce-keepdim-as-reshape", {K::Sum, K::Mean, K::RMax, K::RMin}, reduceKeepdimAsReshape},
      {"concat-of-one", {K::Concat}, concatOfOne},
      {"concat-of-reshapes", {K::Concat}, concatOfReshapesPattern},
      {"concat-of-adjacent-slices", {K::Concat}, concatOfAdjacentSlices},
      {"sub-zero", {K::Sub}, byIdentity<0, false>},
      {"div-by-one", {K::Div}, byIdentity<1, false>},
      {"neg-neg", {K::Neg}, negNeg},
      {"drop-stop-gradient", {K::StopGradient}, dropStopGradient},
      {"to-same-type", {K::Cast, K::Reshape, K::Broadcast, K::Slice}, toSameType},
      {"cast-of-widening-cast", {K::Cast}, castOfWideningCast},
      {"cast-of-permute", {K::Cast}, castOfPermute},
      {"view-of-same-view", {K::Reshape, K::Broadcast}, viewOfSameView},
      {"permute-identity", {K::Permute}, permuteIdentity},
      {"permute-of-unit-dims-as-reshape", {K::Permute}, permuteOfUnitDimsAsReshape},
      {"view-of-constant", {K::Reshape, K::Broadcast, K::Permute, K::Slice}, viewOfConstant},
      {"permute-of-permute", {K::Permute}, permuteOfPermute},
      {"slice-of-concat", {K::Slice}, sliceOfConcat},
      {"slice-of-reshaped-concat", {K::Slice}, sliceOfReshapedConcat},
  };
  return all;
}

// The patterns that apply to ops of `kind`, in the table's order (indices into patterns()).
const std::vector<int>& patternsOf(OpKind kind) {
  static const std::array<std::vector<int>, kOpKindCount> byKind = [] {
    std::array<std::vector<int>, kOpKindCount> out;
    const std::vector<Pattern>& all = patterns();
    for (size_t k = 0; k < kOpKindCount; ++k) {
      const OpKind kd = OpKind(k);
      for (size_t i = 0; i < all.size(); ++i) {
        const auto& kinds = all[i].kinds;
        const bool applies = kinds.empty() ? opInfo(kd).category == OpCategory::Pointwise
                                           : std::find(kinds.begin(), kinds.end(), kd) != kinds.end();
        if (applies) out[k].push_back(int(i));
      }
    }
    return out;
  }();
  return byKind[size_t(kind)];
}

// The first enabled pattern that rewrites `op`, its Rewrite and its index (-1: none).
std::pair<Rewrite, int> rewrite(const Op& op, const std::vector<bool>& enabled) {
  if (op.numResults() != 1 || op.body || op.operands.empty()) return {Rewrite{}, -1};
  const Type& t = op.result()->type;
  Value* a = op.operands[0];
  Value* b = op.operands.size() > 1 ? op.operands[1] : nullptr;
  const std::vector<Pattern>& all = patterns();
  for (int i : patternsOf(op.kind)) {
    if (!enabled[size_t(i)]) continue;
    Rewrite rw = all[size_t(i)].apply(op, a, b, t);
    if (rw.existing || rw.replacement) return {std::move(rw), i};
  }
  return {Rewrite{}, -1};
}

struct Driver {
  std::vector<bool> enabled;
  std::vector<int64_t> hits;  // by pattern
  int maxSweeps = kCanonicalizeMaxSweeps;
  bool limitHit = false;
};

// One forward sweep over `g`; returns whether anything changed.
bool sweep(Graph& g, Driver& d);

bool canonicalizeGraph(Graph& g, Driver& d) {
  bool changed = false;
  for (int i = 0;; ++i) {
    if (i == d.maxSweeps) {
      d.limitHit = true;
      break;
    }
    bool c = sweep(g, d);
    changed |= c;
    if (!c) break;
  }
  return changed;
}

bool sweep(Graph& g, Driver& d) {
  bool changed = false;
  // Tables by number (ir/numbering.h); an op a rewrite makes is numbered as it comes.
  GraphNumbering numbers(g);
  std::vector<int> uses(numbers.numValues(), 0);
  std::vector<Value*> repl(numbers.numValues(), nullptr);  // replaced value -> its replacement
  std::vector<char> erased(numbers.numOps(), 0);           // kept ops that lost their last use
  bool anyErased = false;
  auto number = [&](const Op* op) {
    numbers.add(op);
    uses.resize(numbers.numValues(), 0);
    repl.resize(numbers.numValues(), nullptr);
    erased.resize(numbers.numOps(), 0);
  };
  auto usesOf = [&](const Value* v) -> int& { return uses[numbers.of(v)]; };
  for (auto& op : g.ops)
    for (Value* v : op->operands) ++usesOf(v);
  for (Value* v : g.outputs) ++usesOf(v);

  auto resolve = [&](Value* v) {
    while (Value* to = repl[numbers.of(v)]) v = to;
    return v;
  };
  // Dropped ops stay allocated until the end: a replaced value is still resolved through
  // `repl` from the operands that read it.
  std::vector<std::unique_ptr<Op>> graveyard;
  // Drops one use of `v`; an op all of whose results lose their last use is erased, and
  // so on up the chain.
  auto release = [&](Value* v) {
    std::vector<Value*> stack{v};
    while (!stack.empty()) {
      Value* x = stack.back();
      stack.pop_back();
      if (--usesOf(x) > 0) continue;
      Op* op = x->def;
      if (!op || isSignature(*op) || erased[numbers.of(op)]) continue;
      bool allDead = true;
      for (auto& r : op->results) allDead = allDead && usesOf(r.get()) <= 0;
      if (!allDead) continue;
      erased[numbers.of(op)] = 1;
      anyErased = true;
      for (Value* o : op->operands) stack.push_back(o);
    }
  };

  std::vector<std::unique_ptr<Op>> out;
  out.reserve(g.ops.size());
  for (auto& slot : g.ops) {
    std::unique_ptr<Op> cur = std::move(slot);
    for (Value*& v : cur->operands) v = resolve(v);
    if (cur->body) changed |= canonicalizeGraph(*cur->body, d);
    while (true) {
      auto [rw, which] = rewrite(*cur, d.enabled);
      if (which < 0) break;
      ++d.hits[size_t(which)];
      changed = true;
      Value* r = cur->result(0);
      Value* to = rw.existing;
      if (rw.replacement) {
        for (auto& pre : rw.before) number(pre.get());
        number(rw.replacement.get());
        rw.replacement->loc = cur->loc;
        to = rw.replacement->result(0);
        to->name = r->name;
        for (Value* o : rw.replacement->operands) ++usesOf(o);
        for (auto& pre : rw.before) {
          pre->loc = cur->loc;
          for (Value* o : pre->operands) ++usesOf(o);
          out.push_back(std::move(pre));
        }
      }
      repl[numbers.of(r)] = to;
      usesOf(to) += usesOf(r);
      usesOf(r) = 0;
      for (Value* o : cur->operands) release(o);
      graveyard.push_back(std::move(cur));
      if (!rw.replacement) break;
      cur = std::move(rw.replacement);
    }
    if (cur) out.push_back(std::move(cur));
  }
  for (Value*& v : g.outputs) v = resolve(v);
  g.ops = std::move(out);
  if (anyErased) g.eraseIf([&](Op* op) { return erased[numbers.of(op)] != 0; });
  return changed;
}

class CanonicalizePass : public Pass {
 public:
  explicit CanonicalizePass(int maxSweeps) : maxSweeps_(maxSweeps) {}
  std::string_view name() const override { return "canonicalize"; }
  std::vector<std::string> patternNames() const override { return canonicalizePatternNames(); }
  void disablePatterns(const std::set<std::string>& names) override { disabled_ = names; }
  std::vector<std::pair<std::string, int64_t>> statistics() const override { return stats_; }

  bool run(Module& m) override {
    Driver d;
    d.maxSweeps = maxSweeps_;
    const std::vector<Pattern>& all = patterns();
    d.hits.assign(all.size(), 0);
    for (const Pattern& p : all) d.enabled.push_back(!disabled_.count(p.name));
    bool changed = false;
    for (auto& f : m.funcs) changed |= canonicalizeGraph(*f, d);
    // Counted by name, in the table's order, the patterns that fired.
    stats_.clear();
    for (size_t i = 0; i < all.size(); ++i)
      if (d.hits[i]) stats_.emplace_back(all[i].name, d.hits[i]);
    // The rules should reach a fixed point in two sweeps (the second only checks); one that
    // keeps changing the program is a bug in the rules, said here rather than hidden.
    if (d.limitHit)
      std::cerr << "warning: canonicalize: the IR still changed after " << d.maxSweeps
                << " sweeps; stopped there (patterns that fired: " << describe(stats_) << ")\n";
    return changed;
  }

 private:
  static std::string describe(const std::vector<std::pair<std::string, int64_t>>& s) {
    std::string out;
    for (const auto& [n, c] : s) out += (out.empty() ? "" : ", ") + n + " " + std::to_string(c);
    return out.empty() ? "none" : out;
  }
  int maxSweeps_;
  std::set<std::string> disabled_;
  std::vector<std::pair<std::string, int64_t>> stats_;
};

}  // namespace

std::vector<std::string> canonicalizePatternNames() {
  std::vector<std::string> names;
  for (const Pattern& p : patterns()) names.push_back(p.name);
  return names;
}

std::unique_ptr<Pass> createCanonicalizePass(int maxSweeps) { return std::make_unique<CanonicalizePass>(maxSweeps); }
std::unique_ptr<Pass> createCanonicalizePass() { return createCanonicalizePass(kCanonicalizeMaxSweeps); }

}  // namespace fusec
