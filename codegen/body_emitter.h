// Evaluates a kernel body at a symbolic index: the value of any body Value at a given
// multi-index (C++ expressions, one per dim) becomes lines of CUDA that compute it into a
// named register. Layout ops (reshape, permute, broadcast, slice, concat) and gather are
// index arithmetic over their operand; a body `input` is a load from its operand pointer;
// reductions are registers the family code binds (the family knows how a row is iterated).
// Values are computed at most once per index within a scope (a C++ block), so a value read
// twice at one point is one register.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace fusec::codegen {

using Index = std::vector<std::string>;  // one `long long` C++ expression per dim

// Lines of generated source with indentation.
class CodeWriter {
 public:
  void line(const std::string& s);
  void open(const std::string& s);   // `s {` and indent
  void close(const std::string& s = "}");
  std::string str() const { return out_; }

 private:
  std::string out_;
  int depth_ = 0;
};

// Index arithmetic helpers (size-1 dims index 0; the emitted text stays readable).
std::string linearize(const Index& idx, const Shape& shape);
Index delinearize(CodeWriter& w, const std::string& linear, const Shape& shape, const std::string& prefix);

class BodyEmitter {
 public:
  // Operand k of the kernel is the pointer `in<k>`, result k is `out<k>`.
  BodyEmitter(const Graph& body, CodeWriter& w);

  // The register holding `v` at `idx` (emits what computes it, if not already in scope).
  std::string eval(const Value* v, const Index& idx);
  // `ptr[linearize(idx)] = v at idx`.
  void store(const Value* v, const std::string& ptr, const Index& idx);
  // A reduction's value for the current row/column/scalar, whatever index it is read at.
  void bindReduction(const Value* v, const std::string& reg) { bound_[v] = reg; }
  // The element of body input `input` at row-major position `linear` (spelled as
  // linearize() spells it for the index it is read at) is already in `reg`: a vector or
  // register-array load. Read directly or through reshapes (which keep the position), it
  // comes from there instead of memory. Scoped like the memo.
  void bindElement(const Value* input, const std::string& linear, const std::string& reg);

  void openScope(const std::string& header);  // a C++ block with its own memo
  void closeScope();
  std::string fresh(const std::string& prefix);
  CodeWriter& writer() { return w_; }
  // The body op as IR-like text for comments: `#3 = mul(#1, #2) : f32[4,8]`.
  std::string describe(const Op& op) const;

 private:
  std::string compute(const Value* v, const Index& idx);
  const std::string* boundElement(const Value* input, const std::string& linear) const;
  std::string layoutOperandIndex(const Op& op, const Index& idx, Index& in);

  const Graph& body_;
  CodeWriter& w_;
  std::map<const Op*, int> inputNumber_, position_;
  std::vector<std::map<std::string, std::string>> memo_;  // per scope: key -> register
  std::map<const Value*, std::string> bound_;
  int counter_ = 0;
};

}  // namespace fusec::codegen
