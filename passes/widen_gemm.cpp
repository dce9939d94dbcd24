// The `widen-gemm-outputs` pass (passes/widen_gemm.h): function outputs that are a bf16 GEMM's
// result cast to f32 come from the GEMM in f32.
#include "passes/widen_gemm.h"

#include "ir/numbering.h"
#include "passes/pass.h"

namespace fusec {

Value* widenGemmCast(Value* cast, const std::function<int(const Value*)>& uses) {
  const Op* c = cast->def;
  if (!c || c->kind != OpKind::Cast || cast->type.dtype != DType::f32) return nullptr;
  Value* r = c->operands[0];
  Op* mm = r->def;
  if (!mm || mm->kind != OpKind::Matmul || r->type.dtype != DType::bf16 || uses(r) != 1 || !mm->attrStr("out_dtype").empty())
    return nullptr;
  mm->setAttr("out_dtype", std::string(dtypeName(DType::f32)));
  r->type.dtype = DType::f32;
  return r;
}

namespace {

bool widenGemmOutputs(Graph& g) {
  const GraphNumbering numbers(g);  // tables by number (ir/numbering.h)
  std::vector<int> uses(numbers.numValues(), 0);
  for (auto& op : g.ops)
    for (const Value* v : op->operands) ++uses[numbers.of(v)];
  for (const Value* v : g.outputs) ++uses[numbers.of(v)];
  std::vector<Value*> widened(numbers.numValues(), nullptr);  // cast result -> the GEMM result that replaces it
  bool any = false;
  for (Value* x : g.outputs) {
    if (widened[numbers.of(x)]) continue;  // returned twice
    if (Value* r = widenGemmCast(x, [&](const Value* v) { return uses[numbers.of(v)]; })) {
      r->name = x->name;  // the output keeps its name (a gradient's)
      widened[numbers.of(x)] = r;
      any = true;
    }
  }
  if (!any) return false;
  // One sweep over the ops for all of them (a backward returns hundreds of gradients).
  auto rewire = [&](Value*& v) {
    if (Value* r = widened[numbers.of(v)]) v = r;
  };
  for (auto& op : g.ops)
    for (Value*& v : op->operands) rewire(v);
  for (Value*& v : g.outputs) rewire(v);
  g.eraseIf([&](Op* op) { return op->numResults() == 1 && widened[numbers.of(op->result())]; });
  return true;
}

}  // namespace

std::unique_ptr<Pass> createWidenGemmOutputsPass() {
  return std::make_unique<FunctionPass>("widen-gemm-outputs", &widenGemmOutputs);
}

}  // namespace fusec
