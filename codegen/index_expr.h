// Index arithmetic of generated kernels as typed expressions instead of text: integer
// constants, named variables with the values codegen knows they take (a thread's position, a
// loop counter, a coordinate split off a linear position), sums, products by constants, and
// division and remainder by positive constants. A term codegen spells itself (a gather's
// data-chosen index, a lane table's entry) is a variable with no known range. The rules
// assume that every expression is non-negative wherever its value is used (every index is a
// position in a tensor), opaque terms included: (t * 64 + b) / 64 is t for b in [0, 64)
// whatever is known of t.
//
// Expressions are immutable; each prints as C++ (`str()`) when first asked and keeps the text,
// which is the key the body emitter memoises values by, so two equal expressions built the
// same way print the same.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fusec::codegen {

// The values an expression can take: [lo, hi] when `known`.
struct IndexRange {
  bool known = false;
  int64_t lo = 0, hi = 0;
};

class IndexExpr {
 public:
  enum class Kind { Const, Var, Add, Mul, Div, Mod };

  IndexExpr() : IndexExpr(int64_t(0)) {}
  IndexExpr(int64_t c);  // NOLINT(google-explicit-constructor): a constant index is its number
  IndexExpr(int c) : IndexExpr(int64_t(c)) {}  // NOLINT(google-explicit-constructor)
  // A variable taking the values lo..hi; or, without a range, any integer C++ expression
  // codegen spells itself (the rules treat it as an unknown).
  static IndexExpr var(const std::string& name, int64_t lo, int64_t hi);
  static IndexExpr var(const std::string& name);
  // A register holding `definition` (a coordinate codegen computed once), taking the values
  // lo..hi. It prints as its name; division and remainder look through it to the definition
  // where that leaves less to compute.
  static IndexExpr reg(const std::string& name, const IndexExpr& definition, int64_t lo, int64_t hi);

  // The same value where it is known to lie in [lo, hi] (inside a branch that tested it): a
  // variable with the narrower range, printed as this expression and looked through like a
  // register.
  IndexExpr within(int64_t lo, int64_t hi) const;

  Kind kind() const;
  std::optional<int64_t> constant() const;
  bool isZero() const { return constant() == int64_t(0); }
  const std::string& str() const;
  IndexRange range() const;
  // Add: the terms; Mul, Div, Mod: the one operand (`factor()` is the constant); a register
  // (Var): its definition.
  const std::vector<IndexExpr>& operands() const;
  int64_t factor() const;

  // The divisions and remainders computing this takes (a register's are already done).
  int divisions() const;
  // The same value with each register replaced by its definition, `depth` registers deep,
  // simplified again.
  IndexExpr expanded(int depth) const;

  // The value at an assignment of the variables (tests; every variable but a register must
  // be assigned, a register is its definition's value).
  int64_t evaluate(const std::map<std::string, int64_t>& vars) const;

  // Structural constructors: what the operators below build.
  static IndexExpr sum(std::vector<IndexExpr> terms);
  static IndexExpr product(const IndexExpr& x, int64_t c);
  static IndexExpr quotient(const IndexExpr& x, int64_t c);
  static IndexExpr remainder(const IndexExpr& x, int64_t c);

 private:
  struct Node;
  explicit IndexExpr(std::shared_ptr<const Node> n) : n_(std::move(n)) {}
  IndexExpr expandOnce(int depth) const;  // expanded() without its memo
  static IndexExpr byConstant(Kind kind, const IndexExpr& x, int64_t c);  // Mul, Div or Mod
  std::shared_ptr<const Node> n_;
};

IndexExpr operator+(const IndexExpr& a, const IndexExpr& b);
IndexExpr operator-(const IndexExpr& a, int64_t c);
IndexExpr operator*(const IndexExpr& a, int64_t c);
IndexExpr operator/(const IndexExpr& a, int64_t c);
IndexExpr operator%(const IndexExpr& a, int64_t c);

}  // namespace fusec::codegen
