#include "codegen/index_expr.h"

#include "ir/error.h"

namespace fusec::codegen {

struct IndexExpr::Node {
  Kind kind = Kind::Const;
  int64_t value = 0;  // Const: the value; Mul, Div, Mod: the factor
  std::string name;   // Var
  IndexRange range;   // Var: as given; others: derived when built
  std::vector<IndexExpr> operands;
  std::string text;  // C++, printed once when built
};

namespace {

IndexRange unknown() { return {}; }
IndexRange exactly(int64_t c) { return {true, c, c}; }

}  // namespace

IndexExpr::IndexExpr(int64_t c) {
  auto n = std::make_shared<Node>();
  n->value = c;
  n->range = exactly(c);
  n->text = std::to_string(c);
  n_ = std::move(n);
}

IndexExpr IndexExpr::var(const std::string& name, int64_t lo, int64_t hi) {
  auto n = std::make_shared<Node>();
  n->kind = Kind::Var;
  n->name = n->text = name;
  if (lo <= hi) n->range = {true, lo, hi};
  return IndexExpr(std::shared_ptr<const Node>(std::move(n)));
}

IndexExpr IndexExpr::var(const std::string& name) {
  auto n = std::make_shared<Node>();
  n->kind = Kind::Var;
  n->name = n->text = name;
  return IndexExpr(std::shared_ptr<const Node>(std::move(n)));
}

IndexExpr::Kind IndexExpr::kind() const { return n_->kind; }
std::optional<int64_t> IndexExpr::constant() const {
  return n_->kind == Kind::Const ? std::optional<int64_t>(n_->value) : std::nullopt;
}
const std::string& IndexExpr::str() const { return n_->text; }
IndexRange IndexExpr::range() const { return n_->range; }
const std::vector<IndexExpr>& IndexExpr::operands() const { return n_->operands; }
int64_t IndexExpr::factor() const { return n_->value; }
const std::string& IndexExpr::name() const { return n_->name; }

int64_t IndexExpr::evaluate(const std::map<std::string, int64_t>& vars) const {
  switch (n_->kind) {
    case Kind::Const: return n_->value;
    case Kind::Var: {
      auto it = vars.find(n_->name);
      if (it == vars.end()) throw Error("index expression: variable '" + n_->name + "' has no value");
      return it->second;
    }
    case Kind::Add: {
      int64_t s = 0;
      for (const auto& t : n_->operands) s += t.evaluate(vars);
      return s;
    }
    case Kind::Mul: return n_->operands[0].evaluate(vars) * n_->value;
    case Kind::Div: return n_->operands[0].evaluate(vars) / n_->value;
    case Kind::Mod: return n_->operands[0].evaluate(vars) % n_->value;
  }
  return 0;
}

// The printed forms: a sum in parentheses with a negative constant as a subtraction (a sum
// of one term too, as linearised positions always were), a product bare (it binds tighter
// than the sums it sits in), a quotient in parentheses, a remainder bare.
IndexExpr IndexExpr::sum(std::vector<IndexExpr> terms) {
  if (terms.empty()) return IndexExpr(int64_t(0));
  auto n = std::make_shared<Node>();
  n->kind = Kind::Add;
  n->range = exactly(0);
  std::string text;
  for (size_t i = 0; i < terms.size(); ++i) {
    const auto c = terms[i].constant();
    if (i && c && *c < 0) text += " - " + std::to_string(-*c);
    else text += (i ? " + " : "") + terms[i].str();
    const IndexRange r = terms[i].range();
    if (n->range.known && r.known) n->range.lo += r.lo, n->range.hi += r.hi;
    else n->range = unknown();
  }
  n->text = "(" + text + ")";
  n->operands = std::move(terms);
  return IndexExpr(std::shared_ptr<const Node>(std::move(n)));
}

namespace {

void checkFactor(int64_t c, const char* what) {
  if (c <= 0) throw Error(std::string("index expression: ") + what + " by " + std::to_string(c) + " (must be positive)");
}

}  // namespace

IndexExpr IndexExpr::product(const IndexExpr& x, int64_t c) {
  checkFactor(c, "product");
  auto n = std::make_shared<Node>();
  n->kind = Kind::Mul;
  n->value = c;
  const IndexRange r = x.range();
  if (r.known) n->range = {true, r.lo * c, r.hi * c};
  n->text = x.str() + " * " + std::to_string(c);
  n->operands = {x};
  return IndexExpr(std::shared_ptr<const Node>(std::move(n)));
}

IndexExpr IndexExpr::quotient(const IndexExpr& x, int64_t c) {
  checkFactor(c, "division");
  auto n = std::make_shared<Node>();
  n->kind = Kind::Div;
  n->value = c;
  const IndexRange r = x.range();
  if (r.known && r.lo >= 0) n->range = {true, r.lo / c, r.hi / c};
  n->text = "(" + x.str() + " / " + std::to_string(c) + ")";
  n->operands = {x};
  return IndexExpr(std::shared_ptr<const Node>(std::move(n)));
}

IndexExpr IndexExpr::remainder(const IndexExpr& x, int64_t c) {
  checkFactor(c, "remainder");
  auto n = std::make_shared<Node>();
  n->kind = Kind::Mod;
  n->value = c;
  const IndexRange r = x.range();
  if (r.known && r.lo >= 0) n->range = r.hi < c ? r : IndexRange{true, 0, c - 1};
  n->text = x.str() + " % " + std::to_string(c);
  n->operands = {x};
  return IndexExpr(std::shared_ptr<const Node>(std::move(n)));
}

IndexExpr operator+(const IndexExpr& a, const IndexExpr& b) { return IndexExpr::sum({a, b}); }
IndexExpr operator-(const IndexExpr& a, int64_t c) { return IndexExpr::sum({a, IndexExpr(-c)}); }
IndexExpr operator*(const IndexExpr& a, int64_t c) { return IndexExpr::product(a, c); }
IndexExpr operator/(const IndexExpr& a, int64_t c) { return IndexExpr::quotient(a, c); }
IndexExpr operator%(const IndexExpr& a, int64_t c) { return IndexExpr::remainder(a, c); }

}  // namespace fusec::codegen
