#include "ir/op_table.h"

#include <cstdlib>
#include <stdexcept>
#include <unordered_map>

namespace fusec {
namespace {

// Parses a default written in the table ("false", "1e-05", "-1").
AttrValue parseDefault(AttrKind kind, const std::string& text) {
  switch (kind) {
    case AttrKind::Bool: return text == "true";
    case AttrKind::Int: return int64_t(std::strtoll(text.c_str(), nullptr, 10));
    case AttrKind::Float: return std::strtod(text.c_str(), nullptr);
    case AttrKind::Str: return text;
    case AttrKind::Ints:
      if (text == "[]") return std::vector<int64_t>{};  // matmul out_perm: empty = identity
      break;
  }
  throw std::logic_error("ops.def: unsupported default for attribute kind");
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// "axes:ints, keepdim:bool=false" -> specs
std::vector<AttrSpec> parseSchema(std::string_view schema) {
  std::vector<AttrSpec> out;
  std::string s(schema);
  size_t pos = 0;
  while (pos < s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = trim(s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    pos = comma == std::string::npos ? s.size() : comma + 1;
    if (item.empty()) continue;
    size_t colon = item.find(':'), eq = item.find('=');
    std::string name = item.substr(0, colon);
    std::string kindText = item.substr(colon + 1, eq == std::string::npos ? std::string::npos : eq - colon - 1);
    AttrSpec spec{name, AttrKind::Int, std::nullopt};
    if (kindText == "int") spec.kind = AttrKind::Int;
    else if (kindText == "ints") spec.kind = AttrKind::Ints;
    else if (kindText == "float") spec.kind = AttrKind::Float;
    else if (kindText == "bool") spec.kind = AttrKind::Bool;
    else if (kindText == "str") spec.kind = AttrKind::Str;
    else throw std::logic_error("ops.def: bad attribute kind " + kindText);
    if (eq != std::string::npos) spec.defaultValue = parseDefault(spec.kind, item.substr(eq + 1));
    out.push_back(std::move(spec));
  }
  return out;
}

std::vector<OpInfo> buildTable() {
  std::vector<OpInfo> t;
#define FIR_OP(Id, Text, Category, Rule, Arity, Attrs) \
  t.push_back(OpInfo{OpKind::Id, Text, OpCategory::Category, TypeRule::Rule, Arity, parseSchema(Attrs)});
#define FIR_POINTWISE(Id, Text, Rule, Arity, Expr) \
  t.push_back(OpInfo{OpKind::Id, Text, OpCategory::Pointwise, TypeRule::Rule, Arity, {}});
#define FIR_COSTLY(Id) t[size_t(OpKind::Id)].costly = true;
#include "ir/ops.def"
  return t;
}

}  // namespace

const std::vector<OpInfo>& allOps() {
  static const std::vector<OpInfo> table = buildTable();
  return table;
}

const OpInfo& opInfo(OpKind k) { return allOps()[size_t(k)]; }

const OpInfo* findOp(std::string_view name) {
  static const std::unordered_map<std::string_view, const OpInfo*> byName = [] {
    std::unordered_map<std::string_view, const OpInfo*> m;
    for (const OpInfo& info : allOps()) m.emplace(info.name, &info);
    return m;
  }();
  auto it = byName.find(name);
  return it == byName.end() ? nullptr : it->second;
}

int OpInfo::attrIndex(std::string_view attr) const {
  for (size_t i = 0; i < attrs.size(); ++i)
    if (attrs[i].name == attr) return int(i);
  return -1;
}

std::string_view attrKindName(AttrKind k) {
  switch (k) {
    case AttrKind::Int: return "int";
    case AttrKind::Ints: return "ints";
    case AttrKind::Float: return "float";
    case AttrKind::Bool: return "bool";
    case AttrKind::Str: return "str";
  }
  return "?";
}

std::string_view categoryName(OpCategory c) {
  switch (c) {
    case OpCategory::Source: return "source";
    case OpCategory::Pointwise: return "pointwise";
    case OpCategory::Reduction: return "reduction";
    case OpCategory::Layout: return "layout";
    case OpCategory::Matmul: return "matmul";
    case OpCategory::Composite: return "composite";
    case OpCategory::Fused: return "fused";
    case OpCategory::Collective: return "collective";
  }
  return "?";
}

bool attrValueMatches(const AttrValue& v, AttrKind k) {
  switch (k) {
    case AttrKind::Int: return std::holds_alternative<int64_t>(v);
    case AttrKind::Ints: return std::holds_alternative<std::vector<int64_t>>(v);
    case AttrKind::Float: return std::holds_alternative<double>(v);
    case AttrKind::Bool: return std::holds_alternative<bool>(v);
    case AttrKind::Str: return std::holds_alternative<std::string>(v);
  }
  return false;
}

}  // namespace fusec
