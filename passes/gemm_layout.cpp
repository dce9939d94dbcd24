// gemm-layout: no transpose copy next to a GEMM.
//
//   result side   permute(matmul) where the matmul has no other use folds into the
//                 matmul's out_perm when N stays last; when the permute moves M last instead
//                 (a transposed result) the operands swap (C^T = B^T A^T) and N is last again.
//                 reshape(permute(matmul)) -- the attention output [B,H,T,dh] ->
//                 [B,T,H,dh] -> [B,T,d] -- becomes a reshape of a contiguous result this way.
//                 A single-use cast between them is looked through (permute(cast(matmul))
//                 is cast(permute(matmul))): an imported Linear's weight gradient under
//                 autocast is permute(cast(x^T dy)), which otherwise reached the optimizer
//                 transposed, a strided read of every weight gradient.
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

#include "ir/numbering.h"
#include "ir/strided_view.h"
#include "ir/use_lists.h"
#include "passes/pass.h"

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

// Folds the single permute user of a matmul into the matmul (in place); true if it did.
bool foldResultPermute(Graph& g, Op& mm, UseLists& uses, std::vector<char>& dead, const GraphNumbering& numbers) {
  Value* r = mm.result();
  auto onlyReader = [&](const Value* v) { return uses.uses(v) == 1 && uses.readers(v).size() == 1 ? uses.readers(v)[0] : nullptr; };
  Op* p = onlyReader(r);
  Op* cast = p && p->kind == OpKind::Cast ? p : nullptr;  // looked through: it commutes with the permute
  if (cast) p = onlyReader(cast->result());
  if (!p || p->kind != OpKind::Permute) return false;
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
  r->type.shape = pr->type.shape;
  Value* to = r;  // what the permute's users read now
  if (cast) {
    to = cast->result();
    to->type.shape = pr->type.shape;
  }
  if (!pr->name.empty()) to->name = pr->name;
  for (Op* u : uses.readers(pr))
    for (Value*& v : u->operands)
      if (v == pr) v = to;
  for (Value*& v : g.outputs)
    if (v == pr) v = to;
  uses.moveUses(pr, to);
  dead[numbers.of(p)] = 1;
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
  GraphNumbering numbers(g);  // tables by number (ir/numbering.h); the permutes made below are added
  std::vector<char> dead(numbers.numOps(), 0), touched(numbers.numOps(), 0);
  {
    UseLists uses(g, numbers);
    for (auto& op : g.ops)
      if (op->kind == OpKind::Matmul && !dead[numbers.of(op.get())])
        while (foldResultPermute(g, *op, uses, dead, numbers)) changed = true;
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
        touched[numbers.of(d)] = 1;
        if (!isIdentity(*rest)) {
          out.push_back(makePermute(x, *rest));
          out.back()->loc = d->loc;
          numbers.add(out.back().get());
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
    dead.resize(numbers.numOps(), 0);
    touched.resize(numbers.numOps(), 0);
    const UseLists uses(g, numbers);
    for (auto& op : g.ops)
      if (touched[numbers.of(op.get())] && uses.uses(op->result()) == 0) dead[numbers.of(op.get())] = 1;
    g.eraseIf([&](Op* op) { return dead[numbers.of(op)] != 0; });
  }
  return changed;
}

}  // namespace

std::unique_ptr<Pass> createGemmLayoutPass() { return std::make_unique<FunctionPass>("gemm-layout", &gemmLayout); }

}  // namespace fusec
