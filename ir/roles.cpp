#include "ir/roles.h"

#include "ir/error.h"

namespace fusec {
namespace {

constexpr std::pair<Role, std::string_view> kNames[] = {
    {Role::Data, ""},           {Role::TokenIds, "ids"},      {Role::Targets, "targets"},
    {Role::StepCount, "step"},  {Role::DropoutKey, "dropout_key"}, {Role::Weight, "weight"}, {Role::ExpAvg, "exp_avg"},
    {Role::ExpAvgSq, "exp_avg_sq"}, {Role::WeightCopy, "bf16_copy"}, {Role::Buffer, "buffer"},
    {Role::Cotangent, "cotangent"},
};

void requireSource(const Op& op) {
  if (op.kind != OpKind::Input && op.kind != OpKind::Param)
    throw Error(std::string("internal: roles belong to input and param ops, not '") + std::string(op.info().name) + "'");
}

}  // namespace

std::string_view roleName(Role r) {
  for (const auto& [role, name] : kNames)
    if (role == r) return name;
  return "?";
}

std::optional<Role> parseRole(std::string_view text) {
  for (const auto& [role, name] : kNames)
    if (name == text) return role;
  return std::nullopt;
}

bool roleFits(Role r, OpKind kind) {
  const bool param =
      r == Role::Weight || r == Role::ExpAvg || r == Role::ExpAvgSq || r == Role::WeightCopy || r == Role::Buffer;
  return kind == OpKind::Param ? param : kind == OpKind::Input && !param;
}

Role roleOf(const Op& source) {
  requireSource(source);
  const std::string& text = source.attrStr("role");
  const std::optional<Role> r = parseRole(text);
  if (!r || !roleFits(*r, source.kind))
    throw Error("'" + source.attrStr("name") + "' has the role \"" + text + "\", which is not a role of " +
                std::string(source.info().name));
  return *r;
}

int64_t layerOf(const Op& source) {
  requireSource(source);
  return source.attrInt("layer");
}

const std::string& ownerOf(const Op& source) {
  requireSource(source);
  return source.attrStr("of");
}

void setRole(Op& source, Role r, const std::string& of) {
  requireSource(source);
  if (!roleFits(r, source.kind))
    throw Error("internal: \"" + std::string(roleName(r)) + "\" is not a role of " + std::string(source.info().name));
  source.setAttr("role", std::string(roleName(r)));
  source.setAttr("of", of);
}

void setLayer(Op& source, int64_t layer) {
  requireSource(source);
  source.setAttr("layer", layer);
}

Op* findInputByRole(const Graph& g, Role r) {
  for (Op* in : g.inputs())
    if (roleOf(*in) == r) return in;
  return nullptr;
}

const std::string& ownerName(const Op& param) {
  return roleHasOwner(roleOf(param)) ? ownerOf(param) : param.attrStr("name");
}

const Op* ownerWeight(const Graph& g, const Op& param) {
  return roleHasOwner(roleOf(param)) ? g.findParam(ownerOf(param)) : &param;
}

}  // namespace fusec
