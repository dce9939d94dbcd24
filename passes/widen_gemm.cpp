// The `widen-gemm-outputs` pass (passes/widen_gemm.h): function outputs that are a bf16 GEMM's
// result cast to f32 come from the GEMM in f32.
#include "passes/widen_gemm.h"

#include "passes/pass.h"

namespace fusec {

Value* widenGemmCast(Value* cast, const PtrMap<const Value*, int>& uses) {
  const Op* c = cast->def;
  if (!c || c->kind != OpKind::Cast || cast->type.dtype != DType::f32) return nullptr;
  Value* r = c->operands[0];
  Op* mm = r->def;
  auto used = uses.find(r);
  if (!mm || mm->kind != OpKind::Matmul || r->type.dtype != DType::bf16 || used == uses.end() || used->second != 1 ||
      !mm->attrStr("out_dtype").empty())
    return nullptr;
  mm->setAttr("out_dtype", std::string(dtypeName(DType::f32)));
  r->type.dtype = DType::f32;
  return r;
}

namespace {

bool widenGemmOutputs(Graph& g) {
  PtrMap<const Value*, int> uses;
  for (auto& op : g.ops)
    for (const Value* v : op->operands) ++uses[v];
  for (const Value* v : g.outputs) ++uses[v];
  PtrMap<Value*, Value*> widened;  // cast result -> the GEMM result that replaces it
  for (Value* x : g.outputs) {
    if (widened.count(x)) continue;  // returned twice
    if (Value* r = widenGemmCast(x, uses)) {
      r->name = x->name;  // the output keeps its name (a gradient's)
      widened[x] = r;
    }
  }
  if (widened.empty()) return false;
  // One sweep over the ops for all of them (a backward returns hundreds of gradients).
  for (auto& op : g.ops)
    for (Value*& v : op->operands)
      if (auto it = widened.find(v); it != widened.end()) v = it->second;
  for (Value*& v : g.outputs)
    if (auto it = widened.find(v); it != widened.end()) v = it->second;
  PtrSet<const Op*> casts;
  for (auto& [x, r] : widened) casts.insert(x->def);
  g.eraseIf([&](Op* op) { return casts.count(op) != 0; });
  return true;
}

}  // namespace

std::unique_ptr<Pass> createWidenGemmOutputsPass() {
  return std::make_unique<FunctionPass>("widen-gemm-outputs", &widenGemmOutputs);
}

}  // namespace fusec
