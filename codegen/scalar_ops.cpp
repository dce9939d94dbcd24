#include "codegen/scalar_ops.h"

#include <cctype>
#include <map>

#include "ir/graph.h"

namespace fusec::codegen {

namespace {

const std::map<OpKind, std::string>& formulas() {
  static const std::map<OpKind, std::string> table = {
#define FIR_POINTWISE(Id, Text, Rule, Arity, Expr) {OpKind::Id, #Expr},
#include "ir/ops.def"
  };
  return table;
}

// Overrides for results of low precision (bf16/f16: 8 or 11 significant bits, rounded at
// the store). The hardware approximations err by a few f32 ulps (about 2^-21 relative),
// far below that rounding, while IEEE division and the accurate expf are a dozen
// instructions each: with them the SwiGLU backward kernel was bound by arithmetic, not
// memory. f32 results keep the accurate forms (they are compared with LibTorch at 1e-5).
const std::map<OpKind, std::string>& lowPrecisionFormulas() {
  static const std::map<OpKind, std::string> table = {
      {OpKind::Exp, "__expf(a)"},
      {OpKind::Sigmoid, "__fdividef(1.0f, 1.0f + __expf(-a))"},
      {OpKind::Div, "__fdividef(a, b)"},
      {OpKind::Recip, "__fdividef(1.0f, a)"},
      {OpKind::Rsqrt, "rsqrtf(a)"},
  };
  return table;
}

bool identChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

}  // namespace

bool hasScalarFormula(OpKind k) { return formulas().count(k) != 0; }
bool hasLowPrecisionFormula(OpKind k) { return lowPrecisionFormulas().count(k) != 0; }

std::string scalarFormula(OpKind k, const std::vector<std::string>& operands, bool lowPrecision) {
  auto it = formulas().find(k);
  if (it == formulas().end()) throw Error("codegen: op '" + std::string(opInfo(k).name) + "' has no scalar formula");
  auto fast = lowPrecisionFormulas().find(k);
  const std::string& f = lowPrecision && fast != lowPrecisionFormulas().end() ? fast->second : it->second;
  // Replace the whole identifiers a, b, c (not the `a` inside `sqrt`), parenthesised so
  // that the formula's precedence holds whatever the operand text is.
  std::string out;
  for (size_t i = 0; i < f.size();) {
    if (identChar(f[i])) {
      size_t j = i;
      while (j < f.size() && identChar(f[j])) ++j;
      std::string tok = f.substr(i, j - i);
      if (tok.size() == 1 && tok[0] >= 'a' && tok[0] <= 'c' && size_t(tok[0] - 'a') < operands.size())
        out += "(" + operands[size_t(tok[0] - 'a')] + ")";
      else
        out += tok;
      i = j;
    } else {
      out += f[i++];
    }
  }
  return out;
}

}  // namespace fusec::codegen
