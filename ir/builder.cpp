#include "ir/builder.h"

#include "ir/type_rules.h"

namespace fusec {

std::vector<Value*> Builder::create(OpKind kind, std::vector<Value*> operands, const NamedAttrs& attrs,
                                    std::vector<Type> declared, std::unique_ptr<Graph> body) {
  const OpInfo& info = opInfo(kind);
  std::string opName(info.name);
  auto op = makeOp(kind);
  std::vector<bool> given(info.attrs.size(), false);
  for (const auto& [name, value] : attrs) {
    int i = info.attrIndex(name);
    if (i < 0) throw Error(opName + " has no attribute '" + name + "'");
    if (!attrValueMatches(value, info.attrs[size_t(i)].kind))
      throw Error(opName + " attribute '" + name + "' must be of kind " + std::string(attrKindName(info.attrs[size_t(i)].kind)));
    op->attrs[size_t(i)] = value;
    given[size_t(i)] = true;
  }
  for (size_t i = 0; i < info.attrs.size(); ++i)
    if (!given[i] && !info.attrs[i].defaultValue)
      throw Error(opName + " requires attribute '" + info.attrs[i].name + "'");

  std::vector<Type> operandTypes;
  for (Value* v : operands) {
    if (!v) throw Error(opName + " got a null operand");
    operandTypes.push_back(v->type);
  }
  std::vector<Type> types = checkResultTypes(info, operandTypes, op->attrs, declared, body.get());
  op->operands = std::move(operands);
  op->body = std::move(body);
  for (Type& t : types) {
    op->results.push_back(std::make_unique<Value>());
    op->results.back()->type = std::move(t);
  }
  Op* added = g_.append(std::move(op));
  std::vector<Value*> out;
  for (auto& r : added->results) out.push_back(r.get());
  return out;
}

Value* Builder::input(const std::string& name, Type t) {
  Value* v = create1(OpKind::Input, {}, {{"name", name}}, {std::move(t)});
  return v;
}
Value* Builder::param(const std::string& name, Type t) { return create1(OpKind::Param, {}, {{"name", name}}, {std::move(t)}); }
Value* Builder::constant(double value, Type t) { return create1(OpKind::Constant, {}, {{"value", value}}, {std::move(t)}); }
Value* Builder::iota(int64_t axis, Type t) { return create1(OpKind::Iota, {}, {{"axis", axis}}, {std::move(t)}); }

Value* Builder::cast(Value* a, DType d) {
  if (!a) throw Error("cast got a null operand");
  return create1(OpKind::Cast, {a}, {}, {Type{d, a->type.shape}});
}
Value* Builder::reduce(OpKind k, Value* a, std::vector<int64_t> axes, bool keepdim) {
  return create1(k, {a}, {{"axes", std::move(axes)}, {"keepdim", keepdim}});
}
Value* Builder::reshape(Value* a, Shape s) {
  if (!a) throw Error("reshape got a null operand");
  return create1(OpKind::Reshape, {a}, {}, {Type{a->type.dtype, std::move(s)}});
}
Value* Builder::permute(Value* a, std::vector<int64_t> perm) { return create1(OpKind::Permute, {a}, {{"perm", std::move(perm)}}); }
Value* Builder::broadcast(Value* a, Shape s) {
  if (!a) throw Error("broadcast got a null operand");
  return create1(OpKind::Broadcast, {a}, {}, {Type{a->type.dtype, std::move(s)}});
}
Value* Builder::slice(Value* a, int64_t axis, int64_t start, int64_t end, int64_t step) {
  return create1(OpKind::Slice, {a}, {{"axis", axis}, {"start", start}, {"end", end}, {"step", step}});
}
Value* Builder::concat(std::vector<Value*> xs, int64_t axis) { return create1(OpKind::Concat, std::move(xs), {{"axis", axis}}); }
Value* Builder::gather(Value* x, Value* idx, int64_t axis) { return create1(OpKind::Gather, {x, idx}, {{"axis", axis}}); }
Value* Builder::scatterAdd(Value* base, Value* idx, Value* src, int64_t axis) {
  return create1(OpKind::ScatterAdd, {base, idx, src}, {{"axis", axis}});
}
Value* Builder::matmul(Value* a, Value* b, bool ta, bool tb) {
  return create1(OpKind::Matmul, {a, b}, {{"transpose_a", ta}, {"transpose_b", tb}});
}

}  // namespace fusec
