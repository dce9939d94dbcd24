#include "codegen/index_expr.h"

#include "ir/error.h"

namespace fusec::codegen {

struct IndexExpr::Node {
  Kind kind = Kind::Const;
  int64_t value = 0;  // Const: the value; Mul, Div, Mod: the factor
  IndexRange range;   // Var: as given; others: derived when built
  std::vector<IndexExpr> operands;
  // C++, printed when first asked for (most intermediate expressions never are). Nodes are
  // built and read by one kernel's emitter, on one thread.
  mutable std::string text;
  mutable bool printed = false;
  // expanded(depth) as computed so far (a kernel's coordinates are expanded again for every
  // index they take part in), and whether this expression holds no register at all (then
  // it is its own expansion, which is not stored: a node must not own itself).
  mutable std::vector<std::optional<IndexExpr>> expansions;
  mutable bool noRegisters = false;
  // A narrowed expression (within()): a variable printed as the expression itself, so its
  // divisions are done again wherever it is used.
  bool inlined = false;
};

namespace {

IndexRange unknown() { return {}; }
IndexRange exactly(int64_t c) { return {true, c, c}; }

void checkFactor(int64_t c, const char* what) {
  if (c <= 0) throw Error(std::string("index expression: ") + what + " by " + std::to_string(c) + " (must be positive)");
}

}  // namespace

IndexExpr::IndexExpr(int64_t c) {
  auto n = std::make_shared<Node>();
  n->value = c;
  n->range = exactly(c);
  n->text = std::to_string(c);
  n->printed = true;
  n_ = std::move(n);
}

IndexExpr IndexExpr::var(const std::string& name, int64_t lo, int64_t hi) {
  auto n = std::make_shared<Node>();
  n->kind = Kind::Var;
  n->text = name;
  n->printed = true;
  if (lo <= hi) n->range = {true, lo, hi};
  return IndexExpr(std::shared_ptr<const Node>(std::move(n)));
}

IndexExpr IndexExpr::reg(const std::string& name, const IndexExpr& definition, int64_t lo, int64_t hi) {
  auto n = std::make_shared<Node>();
  n->kind = Kind::Var;
  n->text = name;
  n->printed = true;
  const IndexRange d = definition.range();
  if (d.known) lo = std::max(lo, d.lo), hi = std::min(hi, d.hi);
  if (lo <= hi) n->range = {true, lo, hi};  // empty: a branch no value reaches; claim nothing
  n->operands = {definition};
  return IndexExpr(std::shared_ptr<const Node>(std::move(n)));
}

IndexExpr IndexExpr::var(const std::string& name) {
  auto n = std::make_shared<Node>();
  n->kind = Kind::Var;
  n->text = name;
  n->printed = true;
  return IndexExpr(std::shared_ptr<const Node>(std::move(n)));
}

IndexExpr IndexExpr::within(int64_t lo, int64_t hi) const {
  if (n_->kind == Kind::Const) return *this;
  const IndexRange r = range();
  if (r.known) lo = std::max(lo, r.lo), hi = std::min(hi, r.hi);
  if (r.known && r.lo == lo && r.hi == hi) return *this;
  auto n = std::make_shared<Node>();
  n->kind = Kind::Var;
  n->text = str();
  n->printed = true;
  if (lo <= hi) n->range = {true, lo, hi};  // empty: a branch no value reaches; claim nothing
  // A variable keeps its definition (if any); an expression becomes the definition.
  n->inlined = n_->kind != Kind::Var || n_->inlined;
  n->operands = n_->kind == Kind::Var ? n_->operands : std::vector<IndexExpr>{*this};
  return IndexExpr(std::shared_ptr<const Node>(std::move(n)));
}

IndexExpr::Kind IndexExpr::kind() const { return n_->kind; }
std::optional<int64_t> IndexExpr::constant() const {
  return n_->kind == Kind::Const ? std::optional<int64_t>(n_->value) : std::nullopt;
}
namespace {

// The printed forms: a sum in parentheses with a negative constant as a subtraction (a sum
// of one term too, as linearised positions always were), a product bare (it binds tighter
// than the sums it sits in), a quotient in parentheses, a remainder bare.
std::string print(IndexExpr::Kind kind, const std::vector<IndexExpr>& operands, int64_t factor) {
  switch (kind) {
    case IndexExpr::Kind::Add: {
      std::string text;
      for (size_t i = 0; i < operands.size(); ++i) {
        const auto c = operands[i].constant();
        if (i && c && *c < 0) text += " - " + std::to_string(-*c);
        else text += (i ? " + " : "") + operands[i].str();
      }
      return "(" + text + ")";
    }
    case IndexExpr::Kind::Mul: return operands[0].str() + " * " + std::to_string(factor);
    case IndexExpr::Kind::Div: return "(" + operands[0].str() + " / " + std::to_string(factor) + ")";
    case IndexExpr::Kind::Mod: return operands[0].str() + " % " + std::to_string(factor);
    default: return "";
  }
}

}  // namespace

const std::string& IndexExpr::str() const {
  if (!n_->printed) n_->text = print(n_->kind, n_->operands, n_->value), n_->printed = true;
  return n_->text;
}
IndexRange IndexExpr::range() const { return n_->range; }
const std::vector<IndexExpr>& IndexExpr::operands() const { return n_->operands; }
int64_t IndexExpr::factor() const { return n_->value; }

int64_t IndexExpr::evaluate(const std::map<std::string, int64_t>& vars) const {
  switch (n_->kind) {
    case Kind::Const: return n_->value;
    case Kind::Var: {
      if (!n_->operands.empty()) return n_->operands[0].evaluate(vars);
      auto it = vars.find(n_->text);
      if (it == vars.end()) throw Error("index expression: variable '" + n_->text + "' has no value");
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
  if (n_->kind != Kind::Var || n_->inlined)
    for (const IndexExpr& x : n_->operands) n += x.divisions();
  return n;
}

IndexExpr IndexExpr::expanded(int depth) const {
  if (depth <= 0 || n_->kind == Kind::Const || n_->noRegisters) return *this;
  auto& memo = n_->expansions;
  if (size_t(depth) <= memo.size() && memo[size_t(depth) - 1]) return *memo[size_t(depth) - 1];
  IndexExpr e = expandOnce(depth);
  if (e.n_ == n_) {
    n_->noRegisters = true;
  } else {
    if (memo.size() < size_t(depth)) memo.resize(size_t(depth));
    memo[size_t(depth) - 1] = e;
  }
  return e;
}

IndexExpr IndexExpr::expandOnce(int depth) const {
  if (n_->kind == Kind::Var) return n_->operands.empty() ? *this : n_->operands[0].expanded(depth - 1);
  std::vector<IndexExpr> parts;
  bool same = true;
  for (const IndexExpr& t : n_->operands) {
    parts.push_back(t.expanded(depth));
    same = same && parts.back().n_ == t.n_;
  }
  if (same) return *this;  // nothing below holds a register
  switch (n_->kind) {
    case Kind::Add: {
      IndexExpr s = 0;
      for (const IndexExpr& t : parts) s = s + t;
      return s;
    }
    case Kind::Mul: return parts[0] * n_->value;
    case Kind::Div: return parts[0] / n_->value;
    case Kind::Mod: return parts[0] % n_->value;
    default: return *this;
  }
}

IndexExpr IndexExpr::sum(std::vector<IndexExpr> terms) {
  if (terms.empty()) return IndexExpr(int64_t(0));
  auto n = std::make_shared<Node>();
  n->kind = Kind::Add;
  n->range = exactly(0);
  for (size_t i = 0; i < terms.size(); ++i) {
    const IndexRange r = terms[i].range();
    if (!n->range.known || !r.known || __builtin_add_overflow(n->range.lo, r.lo, &n->range.lo) ||
        __builtin_add_overflow(n->range.hi, r.hi, &n->range.hi))
      n->range = unknown();
  }
  n->operands = std::move(terms);
  return IndexExpr(std::shared_ptr<const Node>(std::move(n)));
}

IndexExpr IndexExpr::byConstant(Kind kind, const IndexExpr& x, int64_t c) {
  checkFactor(c, kind == Kind::Mul ? "product" : kind == Kind::Div ? "division" : "remainder");
  auto n = std::make_shared<Node>();
  n->kind = kind;
  n->value = c;
  const IndexRange r = x.range();
  int64_t lo = 0, hi = 0;
  if (kind == Kind::Mul && r.known && !__builtin_mul_overflow(r.lo, c, &lo) && !__builtin_mul_overflow(r.hi, c, &hi))
    n->range = {true, lo, hi};
  if (kind == Kind::Div && r.known && r.lo >= 0) n->range = {true, r.lo / c, r.hi / c};
  if (kind == Kind::Mod && r.known && r.lo >= 0) n->range = r.hi < c ? r : IndexRange{true, 0, c - 1};
  n->operands = {x};
  return IndexExpr(std::shared_ptr<const Node>(std::move(n)));
}

IndexExpr IndexExpr::product(const IndexExpr& x, int64_t c) { return byConstant(Kind::Mul, x, c); }
IndexExpr IndexExpr::quotient(const IndexExpr& x, int64_t c) { return byConstant(Kind::Div, x, c); }
IndexExpr IndexExpr::remainder(const IndexExpr& x, int64_t c) { return byConstant(Kind::Mod, x, c); }

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

// x's affine form split by c: the part c divides (coefficients divided by c) and the rest.
// With a negative constant, two ways: its floor quotient moved to the first part (the rest
// then has the remainder, in [0, c)), or the constant kept whole in the rest (a concat
// operand's coordinate, x - start inside its branch, has no borrow to carry).
struct Split {
  IndexExpr quotient, rest;
  bool dividesSomething = false;
};
std::vector<Split> splits(const IndexExpr& x, int64_t c) {
  Affine a;
  if (!collect(x, 1, a)) return {};
  std::vector<std::pair<IndexExpr, int64_t>> q, r;
  bool divides = false;
  for (const auto& [t, k] : a.terms) {
    if (k % c == 0) q.push_back({t, k / c}), divides = true;
    else r.push_back({t, k});
  }
  int64_t q0 = a.constant / c, r0 = a.constant % c;
  if (r0 < 0) r0 += c, q0 -= 1;
  std::vector<Split> out{{build(q, q0), build(r, r0), divides || q0 != 0}};
  if (a.constant < 0 && divides) out.push_back({build(q, 0), build(r, a.constant), true});
  return out;
}

// The cheaper of two equal values: fewer divisions, then the shorter text.
IndexExpr cheaper(const IndexExpr& a, const IndexExpr& b) {
  const int da = a.divisions(), db = b.divisions();
  return db < da || (db == da && b.str().size() < a.str().size()) ? b : a;
}

bool nonNegative(const IndexExpr& x) { return x.range().known && x.range().lo >= 0; }
// The one quotient by c that every value of x has, if the ranges prove there is one.
std::optional<int64_t> onlyQuotient(const IndexExpr& x, int64_t c) {
  if (!nonNegative(x) || x.range().lo / c != x.range().hi / c) return std::nullopt;
  return x.range().lo / c;
}

}  // namespace

IndexExpr operator+(const IndexExpr& a, const IndexExpr& b) {
  if (a.isZero()) return b;
  if (b.isZero()) return a;
  Affine f;
  if (!collect(a, 1, f) || !collect(b, 1, f)) return IndexExpr::sum({a, b});
  return build(f.terms, f.constant);
}

IndexExpr operator-(const IndexExpr& a, int64_t c) { return a + IndexExpr(-c); }

IndexExpr operator*(const IndexExpr& a, int64_t c) {
  checkFactor(c, "product");
  if (c == 1) return a;
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
  checkFactor(c, "division");
  return throughRegisters(a, c, divide);
}

IndexExpr operator%(const IndexExpr& a, int64_t c) {
  checkFactor(c, "remainder");
  return throughRegisters(a, c, reduce);
}

namespace {

IndexExpr divide(const IndexExpr& a, int64_t c) {
  if (c == 1) return a;
  if (auto k = a.constant()) return IndexExpr(*k / c);
  if (auto q = onlyQuotient(a, c)) return IndexExpr(*q);
  int64_t ac = 0;
  if (a.kind() == IndexExpr::Kind::Div && mul(a.factor(), c, ac)) return a.operands()[0] / ac;
  IndexExpr best = IndexExpr::quotient(a, c);
  for (const Split& s : splits(a, c))
    if (s.dividesSomething && nonNegative(s.rest)) best = cheaper(best, s.quotient + s.rest / c);
  return best;
}

IndexExpr reduce(const IndexExpr& a, int64_t c) {
  if (c == 1) return IndexExpr(0);
  if (auto k = a.constant()) return IndexExpr(*k % c);
  if (auto q = onlyQuotient(a, c)) return *q == 0 ? a : a - *q * c;
  if (a.kind() == IndexExpr::Kind::Mod && a.factor() % c == 0) return a.operands()[0] % c;
  IndexExpr best = IndexExpr::remainder(a, c);
  for (const Split& s : splits(a, c))
    if (s.dividesSomething && nonNegative(s.rest)) best = cheaper(best, s.rest % c);
  return best;
}

}  // namespace
}  // namespace fusec::codegen
