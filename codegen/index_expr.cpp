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

IndexExpr IndexExpr::reg(const std::string& name, const IndexExpr& definition, int64_t lo, int64_t hi) {
  auto n = std::make_shared<Node>();
  n->kind = Kind::Var;
  n->name = n->text = name;
  n->range = {true, lo, hi};
  const IndexRange d = definition.range();
  if (d.known) n->range = {true, std::max(lo, d.lo), std::min(hi, d.hi)};
  n->operands = {definition};
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
      if (!n_->operands.empty()) return n_->operands[0].evaluate(vars);
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

int IndexExpr::divisions() const {
  int n = n_->kind == Kind::Div || n_->kind == Kind::Mod;
  if (n_->kind != Kind::Var)
    for (const IndexExpr& x : n_->operands) n += x.divisions();
  return n;
}

IndexExpr IndexExpr::expanded(int depth) const {
  switch (n_->kind) {
    case Kind::Const: return *this;
    case Kind::Var: return n_->operands.empty() || depth == 0 ? *this : n_->operands[0].expanded(depth - 1);
    case Kind::Add: {
      IndexExpr s = 0;
      for (const IndexExpr& t : n_->operands) s = s + t.expanded(depth);
      return s;
    }
    case Kind::Mul: return n_->operands[0].expanded(depth) * n_->value;
    case Kind::Div: return n_->operands[0].expanded(depth) / n_->value;
    case Kind::Mod: return n_->operands[0].expanded(depth) % n_->value;
  }
  return *this;
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

// The simplifying operators. A sum is kept as an affine form, terms (a variable, quotient or
// remainder) times positive coefficients plus a constant, in the order the terms first
// appear; division and remainder by c split off the terms whose coefficients c divides when
// what is left is provably non-negative (C's division truncates; on non-negative values it
// is floor division, where (c*Q + R) / c = Q + R / c and (c*Q + R) % c = R % c hold), and
// vanish when the ranges prove the operand already below c.
namespace {

struct Affine {
  std::vector<std::pair<IndexExpr, int64_t>> terms;
  int64_t constant = 0;
};

bool mul(int64_t a, int64_t b, int64_t& out) { return !__builtin_mul_overflow(a, b, &out); }

// Adds coef * x to `a`; false if a coefficient would overflow (the caller keeps x whole).
bool collect(const IndexExpr& x, int64_t coef, Affine& a) {
  int64_t c = 0;
  switch (x.kind()) {
    case IndexExpr::Kind::Const:
      if (!mul(*x.constant(), coef, c) || __builtin_add_overflow(a.constant, c, &a.constant)) return false;
      return true;
    case IndexExpr::Kind::Add:
      for (const IndexExpr& t : x.operands())
        if (!collect(t, coef, a)) return false;
      return true;
    case IndexExpr::Kind::Mul:
      return mul(coef, x.factor(), c) && collect(x.operands()[0], c, a);
    default:
      for (auto& [t, k] : a.terms)
        if (t.str() == x.str()) return !__builtin_add_overflow(k, coef, &k);
      a.terms.push_back({x, coef});
      return true;
  }
}

IndexExpr build(const std::vector<std::pair<IndexExpr, int64_t>>& terms, int64_t constant) {
  std::vector<IndexExpr> parts;
  for (const auto& [t, k] : terms)
    if (k != 0) parts.push_back(k == 1 ? t : IndexExpr::product(t, k));
  if (constant != 0 || parts.empty()) parts.push_back(IndexExpr(constant));
  return parts.size() == 1 ? parts[0] : IndexExpr::sum(std::move(parts));
}

// x's affine form split by c: the part c divides (coefficients divided by c, the constant's
// floor quotient) and the rest (with the constant's remainder, in [0, c)).
struct Split {
  IndexExpr quotient, rest;
  bool dividesSomething = false;
};
std::optional<Split> split(const IndexExpr& x, int64_t c) {
  Affine a;
  if (!collect(x, 1, a)) return std::nullopt;
  std::vector<std::pair<IndexExpr, int64_t>> q, r;
  bool divides = false;
  for (const auto& [t, k] : a.terms) {
    if (k % c == 0) q.push_back({t, k / c}), divides = true;
    else r.push_back({t, k});
  }
  int64_t q0 = a.constant / c, r0 = a.constant % c;
  if (r0 < 0) r0 += c, q0 -= 1;
  divides |= q0 != 0;
  return Split{build(q, q0), build(r, r0), divides};
}

bool nonNegative(const IndexExpr& x) { return x.range().known && x.range().lo >= 0; }
bool below(const IndexExpr& x, int64_t c) { return nonNegative(x) && x.range().hi < c; }

void checkPositive(int64_t c, const char* what) {
  if (c <= 0) throw Error(std::string("index expression: ") + what + " by " + std::to_string(c) + " (must be positive)");
}

}  // namespace

IndexExpr operator+(const IndexExpr& a, const IndexExpr& b) {
  Affine f;
  if (!collect(a, 1, f) || !collect(b, 1, f)) return IndexExpr::sum({a, b});
  return build(f.terms, f.constant);
}

IndexExpr operator-(const IndexExpr& a, int64_t c) { return a + IndexExpr(-c); }

IndexExpr operator*(const IndexExpr& a, int64_t c) {
  checkPositive(c, "product");
  Affine f;
  if (!collect(a, c, f)) return IndexExpr::product(a, c);
  return build(f.terms, f.constant);
}

namespace {

bool holdsRegister(const IndexExpr& x) {
  if (x.kind() == IndexExpr::Kind::Var) return !x.operands().empty();
  for (const IndexExpr& t : x.operands())
    if (holdsRegister(t)) return true;
  return false;
}

IndexExpr divide(const IndexExpr& a, int64_t c);
IndexExpr reduce(const IndexExpr& a, int64_t c);

// `op` of a as it is, or of its registers' definitions, one, two .. registers deep, where
// that takes fewer divisions (a reshape of a reshape: the second split of a position the
// first one merged). Not all the way down by default: the registers near the top are what
// the kernel has already computed, and the position they came from divides again.
IndexExpr throughRegisters(const IndexExpr& a, int64_t c, IndexExpr (*op)(const IndexExpr&, int64_t)) {
  IndexExpr best = op(a, c);
  IndexExpr from = a;
  for (int depth = 1; best.divisions() > 0 && holdsRegister(from) && depth <= 4; ++depth) {
    from = a.expanded(depth);
    IndexExpr open = op(from, c);
    if (open.divisions() < best.divisions()) best = open;
  }
  return best;
}

}  // namespace

IndexExpr operator/(const IndexExpr& a, int64_t c) {
  checkPositive(c, "division");
  return throughRegisters(a, c, divide);
}

IndexExpr operator%(const IndexExpr& a, int64_t c) {
  checkPositive(c, "remainder");
  return throughRegisters(a, c, reduce);
}

namespace {

IndexExpr divide(const IndexExpr& a, int64_t c) {
  if (c == 1) return a;
  if (auto k = a.constant()) return IndexExpr(*k / c);
  if (below(a, c)) return IndexExpr(0);
  int64_t ac = 0;
  if (a.kind() == IndexExpr::Kind::Div && mul(a.factor(), c, ac)) return a.operands()[0] / ac;
  if (auto s = split(a, c); s && s->dividesSomething && nonNegative(s->rest))
    return s->quotient + s->rest / c;  // the rest has nothing c divides: no second split
  return IndexExpr::quotient(a, c);
}

IndexExpr reduce(const IndexExpr& a, int64_t c) {
  if (c == 1) return IndexExpr(0);
  if (auto k = a.constant()) return IndexExpr(*k % c);
  if (below(a, c)) return a;
  if (a.kind() == IndexExpr::Kind::Mod && a.factor() % c == 0) return a.operands()[0] % c;
  if (auto s = split(a, c); s && s->dividesSomething && nonNegative(s->rest))
    return s->rest % c;
  return IndexExpr::remainder(a, c);
}

}  // namespace
}  // namespace fusec::codegen
