#include "ir/type_rules.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "ir/printer.h"

namespace fusec {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw Error(msg); }

std::string typesStr(const std::vector<Type>& ts) {
  std::string s;
  for (size_t i = 0; i < ts.size(); ++i) s += (i ? ", " : "") + ts[i].str();
  return s;
}

// Attribute access by schema position; the caller has checked kinds.
struct Attrs {
  const OpInfo& info;
  const std::vector<AttrValue>& values;
  const AttrValue& get(const char* n) const { return values.at(size_t(info.attrIndex(n))); }
  int64_t i(const char* n) const { return std::get<int64_t>(get(n)); }
  const std::vector<int64_t>& ints(const char* n) const { return std::get<std::vector<int64_t>>(get(n)); }
  bool b(const char* n) const { return std::get<bool>(get(n)); }
  double f(const char* n) const { return std::get<double>(get(n)); }
  const std::string& s(const char* n) const { return std::get<std::string>(get(n)); }
};

const Type& one(const std::vector<Type>& declared, const OpInfo& info) {
  if (declared.size() != 1)
    fail(std::string(info.name) + " needs exactly one declared result type, got " + std::to_string(declared.size()));
  return declared[0];
}

void requireFloat(const Type& t, const OpInfo& info, const char* what = "operand") {
  if (!isFloat(t.dtype))
    fail(std::string(info.name) + " " + what + " must be a float type (f32, bf16, f16), got " + t.str());
}
void requireNumeric(const Type& t, const OpInfo& info) {
  if (t.dtype == DType::boolean) fail(std::string(info.name) + " does not take bool operands, got " + t.str());
}
void requireInt(const Type& t, const OpInfo& info, const char* what) {
  if (!isInt(t.dtype)) fail(std::string(info.name) + " " + what + " must be i64 or i32, got " + t.str());
}
void requireSameType(const std::vector<Type>& ops, size_t from, const OpInfo& info) {
  for (size_t k = from + 1; k < ops.size(); ++k)
    if (ops[k] != ops[from])
      fail(std::string(info.name) + " operands must have the same type, got " + typesStr(ops));
}
void requireValidShape(const Type& t, const OpInfo& info) {
  for (int64_t d : t.shape)
    if (d < 0) fail(std::string(info.name) + " result has a negative dimension: " + t.str());
}

Type reduce(const OpInfo& info, const Type& x, const Attrs& a) {
  std::vector<bool> reduced(size_t(x.rank()), false);
  for (int64_t ax : a.ints("axes")) {
    int n = normalizeAxis(ax, x.rank(), info.name.data());
    if (reduced[size_t(n)]) fail(std::string(info.name) + " axis " + std::to_string(ax) + " listed twice");
    reduced[size_t(n)] = true;
  }
  if (a.ints("axes").empty()) fail(std::string(info.name) + " needs at least one axis");
  Type r{x.dtype, {}};
  for (int d = 0; d < x.rank(); ++d) {
    if (!reduced[size_t(d)]) r.shape.push_back(x.shape[size_t(d)]);
    else if (a.b("keepdim")) r.shape.push_back(1);
  }
  return r;
}

Type matmul(const OpInfo& info, const Type& a, const Type& b, const Attrs& at) {
  if (a.dtype != b.dtype) fail("matmul operands must have the same dtype, got " + a.str() + " and " + b.str());
  requireFloat(a, info);
  if (a.rank() < 2 || b.rank() < 2) fail("matmul operands need rank >= 2, got " + a.str() + " and " + b.str());
  int64_t m = a.shape[size_t(a.rank() - 2)], ka = a.shape[size_t(a.rank() - 1)];
  if (at.b("transpose_a")) std::swap(m, ka);
  int64_t kb = b.shape[size_t(b.rank() - 2)], n = b.shape[size_t(b.rank() - 1)];
  if (at.b("transpose_b")) std::swap(kb, n);
  if (ka != kb)
    fail("matmul contraction sizes differ: " + std::to_string(ka) + " vs " + std::to_string(kb) + " for " + a.str() +
         " x " + b.str());
  Shape batchA(a.shape.begin(), a.shape.end() - 2), batchB(b.shape.begin(), b.shape.end() - 2);
  if (!batchA.empty() && !batchB.empty() && batchA != batchB)
    fail("matmul batch dimensions differ: " + a.str() + " x " + b.str());
  Shape r = batchA.empty() ? batchB : batchA;
  r.push_back(m);
  r.push_back(n);
  // out_perm only reorders whole rows of the result: N must stay innermost so the GEMM
  // still writes unit-stride rows with a leading dimension.
  // out_dtype: a bf16 GEMM may write f32 (its f32 accumulator, not rounded to bf16 first),
  // where a cast to f32 would otherwise follow in a kernel of its own (passes/data_parallel.cpp).
  DType out = a.dtype;
  if (const std::string& od = at.s("out_dtype"); !od.empty()) {
    if (!parseDType(od, out) || !isFloat(out)) fail("matmul out_dtype must be a float dtype, got '" + od + "'");
    if (out != a.dtype && out != DType::f32)
      fail("matmul out_dtype widens to f32 only, got " + od + " for " + std::string(dtypeName(a.dtype)) + " operands");
  }
  const auto& perm = at.ints("out_perm");
  if (perm.empty()) return {Type{out, r}};
  const int64_t rank = int64_t(r.size());
  std::vector<bool> seen(r.size(), false);
  bool valid = int64_t(perm.size()) == rank && perm.back() == rank - 1;
  for (int64_t p : perm) {
    valid = valid && p >= 0 && p < rank && !seen[size_t(p)];
    if (valid) seen[size_t(p)] = true;
  }
  if (!valid)
    fail("matmul out_perm must be a permutation of 0.." + std::to_string(rank - 1) + " ending in " +
         std::to_string(rank - 1) + ", got " + shapeStr(perm));
  Shape permuted;
  for (int64_t p : perm) permuted.push_back(r[size_t(p)]);
  return {Type{out, permuted}};
}

std::vector<Type> kernel(const OpInfo& info, const std::vector<Type>& ops, const std::vector<Type>& declared,
                         const Graph* body) {
  if (!body) fail("kernel has no body");
  auto ins = body->inputs();
  if (ins.size() != ops.size())
    fail("kernel has " + std::to_string(ops.size()) + " operands but its body has " + std::to_string(ins.size()) +
         " inputs");
  for (size_t k = 0; k < ops.size(); ++k)
    if (ins[k]->result()->type != ops[k])
      fail("kernel operand " + std::to_string(k) + " has type " + ops[k].str() + " but body input " +
           std::to_string(k) + " has type " + ins[k]->result()->type.str());
  if (body->outputs.size() != declared.size())
    fail("kernel declares " + std::to_string(declared.size()) + " results but its body returns " +
         std::to_string(body->outputs.size()));
  for (size_t k = 0; k < declared.size(); ++k)
    if (body->outputs[k]->type != declared[k])
      fail("kernel result " + std::to_string(k) + " is declared " + declared[k].str() + " but its body returns " +
           body->outputs[k]->type.str());
  if (declared.empty()) fail("kernel must have at least one result");
  return declared;
}

// attention's o for operands q, k, v ([..., T, d] of one float dtype, equal batch dims).
Type attentionOutput(const OpInfo& info, const Type& q, const Type& k, const Type& v) {
  const std::vector<Type> ops = {q, k, v};
  requireFloat(q, info, "query");
  if (k.dtype != q.dtype || v.dtype != q.dtype) fail("attention operands must share a dtype: " + typesStr(ops));
  if (q.rank() < 2 || k.rank() != q.rank() || v.rank() != q.rank())
    fail("attention operands must be [..., T, d] of equal rank: " + typesStr(ops));
  int r = q.rank();
  // Grouped-query attention: k and v may have fewer heads (their last batch dim) than q, a
  // divisor of q's; query head h reads key/value head h / (q heads / kv heads).
  if (!std::equal(k.shape.begin(), k.shape.end() - 2, v.shape.begin()))
    fail("attention key and value batch dimensions differ: " + typesStr(ops));
  if (!std::equal(q.shape.begin(), q.shape.end() - (r > 2 ? 3 : 2), k.shape.begin()))
    fail("attention batch dimensions differ: " + typesStr(ops));
  if (r > 2) {
    const int64_t heads = q.shape[size_t(r - 3)], kvHeads = k.shape[size_t(r - 3)];
    if (kvHeads != heads && (kvHeads > heads || heads % kvHeads != 0))
      fail("attention key/value heads (" + std::to_string(kvHeads) + ") must divide the query heads (" +
           std::to_string(heads) + "): " + typesStr(ops));
  }
  if (q.shape[size_t(r - 1)] != k.shape[size_t(r - 1)]) fail("attention query and key widths differ: " + typesStr(ops));
  if (k.shape[size_t(r - 2)] != v.shape[size_t(r - 2)]) fail("attention key and value lengths differ: " + typesStr(ops));
  Type t = q;
  t.shape[size_t(r - 1)] = v.shape[size_t(r - 1)];
  return t;
}

// The group of a collective: at least one rank; its float operands are what NCCL reduces.
int64_t collectiveRanks(const OpInfo& info, const Attrs& a, const std::vector<Type>& ops) {
  const int64_t ranks = a.i("ranks");
  if (ranks < 1 || ranks > 65536) fail(std::string(info.name) + " ranks must be in 1..65536, got " + std::to_string(ranks));
  for (const Type& t : ops) requireFloat(t, info);
  return ranks;
}

// all_reduce's and reduce_scatter's `reduce`: the sum or the mean over the ranks.
void requireReduction(const OpInfo& info, const Attrs& a) {
  const std::string& reduce = a.s("reduce");
  if (reduce != "sum" && reduce != "mean")
    fail(std::string(info.name) + " reduce must be \"sum\" or \"mean\", got \"" + reduce + "\"");
}

// reduce_scatter's and shard's operand: ranks blocks of rows.
void requireRankBlocks(const OpInfo& info, const Type& t, int64_t ranks, const char* what) {
  if (t.rank() == 0 || t.shape[0] % ranks != 0)
    fail(std::string(info.name) + " " + what + " " + t.str() + " must have a first dimension divisible by ranks " +
         std::to_string(ranks));
}

}  // namespace

size_t resultCount(const OpInfo& info, size_t operands) {
  switch (info.rule) {
    case TypeRule::Attention: return 2;          // o, lse
    case TypeRule::AttentionBackward: return 3;  // dq, dk, dv
    case TypeRule::AllReduce:
    case TypeRule::ReduceScatter:
    case TypeRule::AllGather: return operands;  // one result per operand: a bucket
    default: return 1;
  }
}

int64_t attentionGroup(const Type& q, const Type& k) {
  const int r = q.rank();
  if (r < 3 || k.rank() != r || k.shape[size_t(r - 3)] <= 0) return 1;
  return q.shape[size_t(r - 3)] / k.shape[size_t(r - 3)];
}

int normalizeAxis(int64_t axis, int rank, const char* what) {
  if (axis < -rank || axis >= rank)
    fail(std::string(what) + " axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return int(axis < 0 ? axis + rank : axis);
}

// Into `res` (assigned, so a caller's vector keeps its capacity: the verifier infers every op's
// types after every pass, and a fresh vector each time was a quarter of a compile's allocations).
static void inferInto(const OpInfo& info, const std::vector<Type>& ops, const std::vector<AttrValue>& attrValues,
                      const std::vector<Type>& declared, const Graph* body, std::vector<Type>& res) {
  std::string name(info.name);
  if (info.arity >= 0 && ops.size() != size_t(info.arity))
    fail(name + " takes " + std::to_string(info.arity) + " operand" + (info.arity == 1 ? "" : "s") + ", got " +
         std::to_string(ops.size()));
  const size_t results = resultCount(info, ops.size());
  if (info.kind != OpKind::Kernel && !declared.empty() && declared.size() != results)
    fail(name + " has " + (results == 1 ? std::string("one result") : std::to_string(results) + " results") + ", got " +
         std::to_string(declared.size()) + " result types");
  if (info.kind != OpKind::Kernel && body) fail(name + " cannot have a body");
  Attrs a{info, attrValues};

  switch (info.rule) {
    case TypeRule::Declared: {
      Type t = one(declared, info);
      requireValidShape(t, info);
      if (info.kind == OpKind::Constant) {
        double v = a.f("value");
        // Integer constants must be integral and in range (checked before any conversion).
        bool integral = std::isfinite(v) && v >= -9.2e18 && v <= 9.2e18 && v == std::floor(v);
        if (!isFloat(t.dtype) && !integral)
          fail("constant " + formatFloat(v) + " is not representable in " + std::string(dtypeName(t.dtype)));
      }
      if ((info.kind == OpKind::Input || info.kind == OpKind::Param) && std::get<std::string>(a.get("name")).empty())
        fail(name + " needs a non-empty name");
      return res.assign({t});
    }
    case TypeRule::Iota: {
      Type t = one(declared, info);
      requireValidShape(t, info);
      if (t.dtype == DType::boolean) fail("iota result cannot be bool");
      normalizeAxis(a.i("axis"), t.rank(), "iota");
      return res.assign({t});
    }
    case TypeRule::UnaryNumeric: requireNumeric(ops[0], info); return res.assign({ops[0]});
    case TypeRule::UnaryFloat: requireFloat(ops[0], info); return res.assign({ops[0]});
    case TypeRule::UnaryBool:
      if (ops[0].dtype != DType::boolean) fail(name + " operand must be bool, got " + ops[0].str());
      return res.assign({ops[0]});
    case TypeRule::BinaryNumeric: requireSameType(ops, 0, info); requireNumeric(ops[0], info); return res.assign({ops[0]});
    case TypeRule::BinaryFloat: requireSameType(ops, 0, info); requireFloat(ops[0], info); return res.assign({ops[0]});
    case TypeRule::BinaryBool:
      requireSameType(ops, 0, info);
      if (ops[0].dtype != DType::boolean) fail(name + " operands must be bool, got " + ops[0].str());
      return res.assign({ops[0]});
    case TypeRule::Compare: requireSameType(ops, 0, info); return res.assign({Type{DType::boolean, ops[0].shape}});
    case TypeRule::Select:
      if (ops[0].dtype != DType::boolean) fail("select condition must be bool, got " + ops[0].str());
      if (ops[1] != ops[2]) fail("select branches must have the same type, got " + ops[1].str() + " and " + ops[2].str());
      if (ops[0].shape != ops[1].shape)
        fail("select condition shape " + shapeStr(ops[0].shape) + " differs from branch shape " + shapeStr(ops[1].shape));
      return res.assign({ops[1]});
    case TypeRule::Cast: {
      Type t = one(declared, info);
      if (t.shape != ops[0].shape) fail("cast cannot change the shape: " + ops[0].str() + " to " + t.str());
      return res.assign({t});
    }
    case TypeRule::ReduceNumeric: requireNumeric(ops[0], info); return res.assign({reduce(info, ops[0], a)});
    case TypeRule::ReduceFloat: requireFloat(ops[0], info); return res.assign({reduce(info, ops[0], a)});
    case TypeRule::Reshape: {
      Type t = one(declared, info);
      requireValidShape(t, info);
      if (t.dtype != ops[0].dtype) fail("reshape cannot change the dtype: " + ops[0].str() + " to " + t.str());
      if (t.numel() != ops[0].numel())
        fail("reshape changes the element count: " + ops[0].str() + " (" + std::to_string(ops[0].numel()) + ") to " +
             t.str() + " (" + std::to_string(t.numel()) + ")");
      return res.assign({t});
    }
    case TypeRule::Permute: {
      const auto& perm = a.ints("perm");
      if (int(perm.size()) != ops[0].rank())
        fail("permute needs " + std::to_string(ops[0].rank()) + " entries in perm, got " + std::to_string(perm.size()));
      std::vector<bool> seen(perm.size(), false);
      Type t{ops[0].dtype, {}};
      for (int64_t p : perm) {
        if (p < 0 || p >= ops[0].rank() || seen[size_t(p)])
          fail("permute perm is not a permutation of 0.." + std::to_string(ops[0].rank() - 1));
        seen[size_t(p)] = true;
        t.shape.push_back(ops[0].shape[size_t(p)]);
      }
      return res.assign({t});
    }
    case TypeRule::Broadcast: {
      Type t = one(declared, info);
      requireValidShape(t, info);
      const Type& x = ops[0];
      if (t.dtype != x.dtype) fail("broadcast cannot change the dtype: " + x.str() + " to " + t.str());
      if (x.rank() > t.rank()) fail("broadcast cannot lower the rank: " + x.str() + " to " + t.str());
      int off = t.rank() - x.rank();
      for (int d = 0; d < x.rank(); ++d) {
        int64_t xs = x.shape[size_t(d)], ts = t.shape[size_t(d + off)];
        if (xs != ts && xs != 1)
          fail("cannot broadcast " + x.str() + " to " + t.str() + ": dimension " + std::to_string(d) + " is " +
               std::to_string(xs));
      }
      return res.assign({t});
    }
    case TypeRule::Slice: {
      const Type& x = ops[0];
      int ax = normalizeAxis(a.i("axis"), x.rank(), "slice");
      int64_t start = a.i("start"), end = a.i("end"), step = a.i("step"), dim = x.shape[size_t(ax)];
      if (step <= 0) fail("slice step must be positive, got " + std::to_string(step));
      if (start < 0 || start > end || end > dim)
        fail("slice [" + std::to_string(start) + ", " + std::to_string(end) + ") is out of range for dimension of size " +
             std::to_string(dim));
      if (start == end)  // see the verifier: no value may have a zero-size dimension
        fail("slice [" + std::to_string(start) + ", " + std::to_string(end) +
             ") is empty: fusec does not support tensors with a zero-size dimension");
      Type t = x;
      // ceil((end - start) / step) without end - start + step - 1, which overflows for a
      // step near INT64_MAX (and then inferred f32[0] for a one-element slice).
      t.shape[size_t(ax)] = (end - start - 1) / step + 1;
      return res.assign({t});
    }
    case TypeRule::Concat: {
      if (ops.empty()) fail("concat needs at least one operand");
      int ax = normalizeAxis(a.i("axis"), ops[0].rank(), "concat");
      Type t = ops[0];
      for (size_t k = 1; k < ops.size(); ++k) {
        const Type& o = ops[k];
        bool ok = o.dtype == t.dtype && o.rank() == t.rank();
        for (int d = 0; ok && d < o.rank(); ++d)
          if (d != ax && o.shape[size_t(d)] != t.shape[size_t(d)]) ok = false;
        if (!ok) fail("concat operands disagree outside axis " + std::to_string(ax) + ": " + typesStr(ops));
        t.shape[size_t(ax)] += o.shape[size_t(ax)];
      }
      return res.assign({t});
    }
    case TypeRule::Gather: {
      const Type &x = ops[0], &idx = ops[1];
      requireInt(idx, info, "index");
      if (idx.rank() != x.rank()) fail("gather index rank " + std::to_string(idx.rank()) + " differs from source rank " + std::to_string(x.rank()));
      int ax = normalizeAxis(a.i("axis"), x.rank(), "gather");
      for (int d = 0; d < x.rank(); ++d)
        if (d != ax && idx.shape[size_t(d)] != x.shape[size_t(d)])
          fail("gather index shape " + shapeStr(idx.shape) + " must match source " + shapeStr(x.shape) + " outside axis " + std::to_string(ax));
      return res.assign({Type{x.dtype, idx.shape}});
    }
    case TypeRule::ScatterAdd: {
      const Type &base = ops[0], &idx = ops[1], &src = ops[2];
      requireInt(idx, info, "index");
      if (src.dtype != base.dtype) fail("scatter_add source dtype " + src.str() + " differs from base " + base.str());
      if (idx.shape != src.shape) fail("scatter_add index shape " + shapeStr(idx.shape) + " differs from source shape " + shapeStr(src.shape));
      if (src.rank() != base.rank()) fail("scatter_add source rank differs from base: " + src.str() + " vs " + base.str());
      int ax = normalizeAxis(a.i("axis"), base.rank(), "scatter_add");
      for (int d = 0; d < base.rank(); ++d)
        if (d != ax && src.shape[size_t(d)] != base.shape[size_t(d)])
          fail("scatter_add source " + shapeStr(src.shape) + " must match base " + shapeStr(base.shape) + " outside axis " + std::to_string(ax));
      return res.assign({base});
    }
    case TypeRule::Matmul: return res.assign({matmul(info, ops[0], ops[1], a)});
    case TypeRule::Uniform:
      for (const Type& t : ops)
        if (t.dtype != DType::i64) fail(name + " takes i64 operands, got " + t.str());
      requireSameType(ops, 0, info);
      return res.assign({Type{DType::f32, ops[0].shape}});
    case TypeRule::Dropout: {
      requireFloat(ops[0], info);
      if (ops[1] != Type{DType::i64, {}}) fail("dropout key must be i64[], got " + ops[1].str());
      const double p = a.f("p");
      if (!(p >= 0 && p < 1)) fail("dropout p must lie in [0, 1), got " + formatFloat(p));
      return res.assign({ops[0]});
    }
    case TypeRule::SoftmaxLike:
      requireFloat(ops[0], info);
      if (info.attrIndex("axis") >= 0) {
        if (ops[0].rank() == 0) fail(name + " needs rank >= 1");
        normalizeAxis(a.i("axis"), ops[0].rank(), info.name.data());
      }
      if (info.attrIndex("approximate") >= 0 && a.s("approximate") != "none" && a.s("approximate") != "tanh")
        fail(name + " approximate must be \"none\" or \"tanh\", got \"" + a.s("approximate") + "\"");
      return res.assign({ops[0]});
    case TypeRule::RMSNorm: {
      const Type &x = ops[0], &g = ops[1];
      requireFloat(x, info);
      if (x.rank() < 1) fail("rmsnorm needs rank >= 1");
      if (g.dtype != x.dtype || g.rank() != 1 || g.shape[0] != x.shape.back())
        fail("rmsnorm weight must be " + std::string(dtypeName(x.dtype)) + "[" + std::to_string(x.shape.back()) + "], got " + g.str());
      if (!(a.f("eps") > 0)) fail("rmsnorm eps must be positive");
      return res.assign({x});
    }
    case TypeRule::LayerNorm: {
      const Type& x = ops[0];
      requireFloat(x, info);
      if (x.rank() < 1) fail("layernorm needs rank >= 1");
      const std::string want = std::string(dtypeName(x.dtype)) + "[" + std::to_string(x.shape.back()) + "]";
      for (size_t k : {size_t(1), size_t(2)})
        if (ops[k].dtype != x.dtype || ops[k].rank() != 1 || ops[k].shape[0] != x.shape.back())
          fail(std::string("layernorm ") + (k == 1 ? "weight" : "bias") + " must be " + want + ", got " + ops[k].str());
      if (!(a.f("eps") > 0)) fail("layernorm eps must be positive");
      return res.assign({x});
    }
    case TypeRule::Rope: {
      const Type &x = ops[0], &pos = ops[1];
      requireFloat(x, info);
      requireInt(pos, info, "positions");
      if (x.rank() < 2 || x.shape.back() % 2 != 0) fail("rope input must be [..., T, d] with even d, got " + x.str());
      if (pos.rank() != 1 || pos.shape[0] != x.shape[size_t(x.rank() - 2)])
        fail("rope positions must be [" + std::to_string(x.shape[size_t(x.rank() - 2)]) + "], got " + pos.str());
      if (!(a.f("theta") > 0)) fail("rope theta must be positive");
      return res.assign({x});
    }
    case TypeRule::CrossEntropy: {
      const Type &logits = ops[0], &tgt = ops[1];
      requireFloat(logits, info, "logits");
      requireInt(tgt, info, "targets");
      if (logits.rank() < 1) fail("cross_entropy logits need rank >= 1");
      Shape rows(logits.shape.begin(), logits.shape.end() - 1);
      if (tgt.shape != rows) fail("cross_entropy targets must be " + shapeStr(rows) + ", got " + tgt.str());
      return res.assign({Type{logits.dtype, {}}});
    }
    case TypeRule::Attention: {
      const Type& q = ops[0];
      Type o = attentionOutput(info, ops[0], ops[1], ops[2]);
      Type lse{DType::f32, Shape(q.shape.begin(), q.shape.end() - 1)};
      return res.assign({o, lse});
    }
    case TypeRule::AttentionBackward: {
      const Type &q = ops[0], &k = ops[1], &v = ops[2], &o = ops[3], &dO = ops[4], &lse = ops[5];
      const Type want = attentionOutput(info, q, k, v);
      if (o != want) fail("attention_backward output must be " + want.str() + ", got " + o.str());
      if (dO != want) fail("attention_backward output gradient must be " + want.str() + ", got " + dO.str());
      const Type wantLse{DType::f32, Shape(q.shape.begin(), q.shape.end() - 1)};
      if (lse != wantLse) fail("attention_backward lse must be " + wantLse.str() + ", got " + lse.str());
      return res.assign({q, k, v});
    }
    case TypeRule::Kernel: res = kernel(info, ops, declared, body);
      return;
    case TypeRule::AllReduce: {
      collectiveRanks(info, a, ops);
      requireReduction(info, a);
      return res.assign(ops.begin(), ops.end());
    }
    case TypeRule::ReduceScatter: {
      const int64_t ranks = collectiveRanks(info, a, ops);
      requireReduction(info, a);
      std::vector<Type> out;
      for (const Type& x : ops) {
        requireRankBlocks(info, x, ranks, "operand");
        out.push_back(x);
        out.back().shape[0] /= ranks;
      }
      return res.assign(out.begin(), out.end());
    }
    case TypeRule::Shard: {
      const int64_t ranks = collectiveRanks(info, a, ops);
      requireRankBlocks(info, ops[0], ranks, "operand");
      Type t = ops[0];
      t.shape[0] /= ranks;
      return res.assign({t});
    }
    case TypeRule::AllGather: {
      const int64_t ranks = collectiveRanks(info, a, ops);
      std::vector<Type> out;
      for (const Type& x : ops) {
        if (x.rank() == 0) fail("all_gather operand must have at least one dimension, got " + x.str());
        Type t = x;
        if (t.shape[0] > std::numeric_limits<int64_t>::max() / ranks) fail("all_gather result is too large: " + t.str());
        t.shape[0] *= ranks;
        out.push_back(t);
      }
      return res.assign(out.begin(), out.end());
    }
  }
  fail("internal: unhandled type rule for " + name);
}

std::vector<Type> inferResultTypes(const OpInfo& info, const std::vector<Type>& operands,
                                   const std::vector<AttrValue>& attrs, const std::vector<Type>& declared,
                                   const Graph* body) {
  std::vector<Type> inferred;
  inferInto(info, operands, attrs, declared, body, inferred);
  return inferred;
}

void checkResultTypes(const OpInfo& info, const std::vector<Type>& operands, const std::vector<AttrValue>& attrs,
                      const std::vector<Type>& declared, const Graph* body, std::vector<Type>& inferred) {
  if (&inferred == &declared) throw std::logic_error("checkResultTypes: `inferred` is `declared`");
  inferInto(info, operands, attrs, declared, body, inferred);
  if (!declared.empty() && inferred != declared)
    fail("result type " + typesStr(declared) + " does not match the inferred " + typesStr(inferred));
}

std::vector<Type> checkResultTypes(const OpInfo& info, const std::vector<Type>& operands,
                                   const std::vector<AttrValue>& attrs, const std::vector<Type>& declared,
                                   const Graph* body) {
  std::vector<Type> inferred;
  checkResultTypes(info, operands, attrs, declared, body, inferred);
  return inferred;
}

}  // namespace fusec
