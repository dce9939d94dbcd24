// gemm-layout: no transpose copy next to a GEMM.
//
//   result side   permute(matmul) where the matmul has no other use folds into the
//                 matmul's out_perm when N stays last; when the permute moves M last instead
//                 (a transposed result) the operands swap (C^T = B^T A^T) and N is last again.
//                 reshape(permute(matmul)) -- the attention output [B,H,T,dh] ->
//                 [B,T,H,dh] -> [B,T,d] -- becomes a reshape of a contiguous result this way.
//   operand side  a permute feeding an operand that swaps the last two dims (possibly along
//                 with a reorder of the batch dims) becomes that operand's transpose flag
//                 (composed with the existing one), leaving at most a batch-only permute.
//                 Any other view chain stays when the GEMM can read it in place
//                 (gemmReadableOperand); what is left unreadable is reported by
//                 unreadableGemmOperands (fuse materialises those).
//
// Result folds run first: they change the layout of values that later GEMMs read.
#include "passes/gemm_layout.h"

#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "ir/strided_view.h"
#include "passes/pass.h"
#include "support/ptr_hash.h"

namespace fusec {

bool gemmReadableOperand(const Value* v) {
  auto view = resolveView(v);
  return view && gemmReadable(*view, v->type.shape);
}

std::vector<const Op*> unreadableGemmOperands(const Graph& g) {
  std::vector<const Op*> bad;
  for (auto& op : g.ops)
    if (op->kind == OpKind::Matmul)
      for (const Value* v : op->operands)
        if (!gemmReadableOperand(v)) bad.push_back(op.get());
  return bad;
}

namespace {

bool isIdentity(const std::vector<int64_t>& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != int64_t(i)) return false;
  return true;
}

// Users of every value (an op using a value twice is listed twice) and graph-output counts.
struct UseMap {
  PtrMap<const Value*, std::vector<Op*>> users;
  PtrMap<const Value*, int> outputs;
  explicit UseMap(const Graph& g) {
    for (auto& op : g.ops)
      for (Value* v : op->operands) users[v].push_back(op.get());
    for (Value* v : g.outputs) ++outputs[v];
  }
  size_t count(const Value* v) const {
    auto u = users.find(v);
    auto o = outputs.find(v);
    return (u == users.end() ? 0 : u->second.size()) + size_t(o == outputs.end() ? 0 : o->second);
  }
};

// Folds the single permute user of a matmul into the matmul (in place); true if it did.
bool foldResultPermute(Graph& g, Op& mm, UseMap& uses, PtrSet<const Op*>& dead) {
  Value* r = mm.result();
  if (uses.count(r) != 1 || uses.users[r].size() != 1) return false;
  Op* p = uses.users[r][0];
  if (p->kind != OpKind::Permute) return false;
  const auto& perm = p->attrInts("perm");
  const auto& old = mm.attrInts("out_perm");
  const int64_t n = int64_t(perm.size());
  // permute(permute(L, old), perm) == permute(L, q) with q[i] = old[perm[i]]
  std::vector<int64_t> q(perm.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = old.empty() ? perm[i] : old[size_t(perm[i])];
  if (q.back() == n - 2) {
    // The logical result transposed: swap the operands, whose logical result is L with M and
    // N exchanged, and rename those two axes in q.
    const bool ta = mm.attrBool("transpose_a"), tb = mm.attrBool("transpose_b");
    std::swap(mm.operands[0], mm.operands[1]);
    mm.setAttr("transpose_a", !tb);
    mm.setAttr("transpose_b", !ta);
    for (int64_t& a : q) a = a == n - 1 ? n - 2 : a == n - 2 ? n - 1 : a;
  } else if (q.back() != n - 1) {
    return false;
  }
  mm.setAttr("out_perm", isIdentity(q) ? std::vector<int64_t>{} : q);
  Value* pr = p->result();
  r->type = pr->type;
  if (!pr->name.empty()) r->name = pr->name;
  for (Op* u : uses.users[pr])
    for (Value*& v : u->operands)
      if (v == pr) v = r;
  for (Value*& v : g.outputs)
    if (v == pr) v = r;
  uses.users[r] = std::move(uses.users[pr]);
  uses.outputs[r] = uses.outputs[pr];
  uses.users.erase(pr);
  uses.outputs.erase(pr);
  dead.insert(p);
  return true;
}

// A permute that swaps the last two dims (and maybe reorders batch dims): the perm left once
// the swap moves into the transpose flag, else nullopt.
std::optional<std::vector<int64_t>> withoutMatrixSwap(const Op& p) {
  auto perm = p.attrInts("perm");
  const int64_t n = int64_t(perm.size());
  if (n < 2 || perm[size_t(n - 2)] != n - 1 || perm[size_t(n - 1)] != n - 2) return std::nullopt;
  std::swap(perm[size_t(n - 2)], perm[size_t(n - 1)]);
  return perm;
}

bool gemmLayout(Graph& g) {
  bool changed = false;
  PtrSet<const Op*> dead, touched;
  {
    UseMap uses(g);
    for (auto& op : g.ops)
      if (op->kind == OpKind::Matmul && !dead.count(op.get()))
        while (foldResultPermute(g, *op, uses, dead)) changed = true;
  }

  std::vector<std::unique_ptr<Op>> out;
  out.reserve(g.ops.size());
  for (auto& op : g.ops) {
    if (op->kind == OpKind::Matmul) {
      for (int i = 0; i < 2; ++i) {
        const Op* d = op->operands[size_t(i)]->def;
        if (!d || d->kind != OpKind::Permute) continue;
        auto rest = withoutMatrixSwap(*d);
        if (!rest) continue;
        Value* x = d->operands[0];
        touched.insert(d);
        if (!isIdentity(*rest)) {
          out.push_back(makePermute(x, *rest));
          out.back()->loc = d->loc;
          x = out.back()->result();
        }
        op->operands[size_t(i)] = x;
        const char* flag = i == 0 ? "transpose_a" : "transpose_b";
        op->setAttr(flag, !op->attrBool(flag));
        changed = true;
      }
    }
    out.push_back(std::move(op));
  }
  g.ops = std::move(out);

  // Permutes whose only users were folded away.
  if (changed) {
    UseMap uses(g);
    for (auto& op : g.ops)
      if (touched.count(op.get()) && uses.count(op->result()) == 0) dead.insert(op.get());
    g.eraseIf([&](Op* op) { return dead.count(op) != 0; });
  }
  return changed;
}

}  // namespace

std::unique_ptr<Pass> createGemmLayoutPass() { return std::make_unique<FunctionPass>("gemm-layout", &gemmLayout); }

}  // namespace fusec
