// Evaluates a kernel body at a symbolic index: the value of any body Value at a given
// multi-index (C++ expressions, one per dim) becomes lines of CUDA that compute it into a
// named register. Layout ops (reshape, permute, broadcast, slice, concat) and gather are
// index arithmetic over their operand; a body `input` is a load from its operand pointer;
// reductions are registers the family code binds (the family knows how a row is iterated).
// Values are computed at most once per index within a scope (a C++ block), so a value read
// twice at one point is one register.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "codegen/helpers.h"
#include "codegen/index_expr.h"
#include "codegen/kernel_ir.h"
#include "codegen/lanes.h"
#include "ir/graph.h"

namespace fusec::codegen {

using Index = std::vector<IndexExpr>;  // one coordinate per dim

// The row-major position of `idx` in `shape` (size-1 dims and zero coordinates add nothing).
IndexExpr linearize(const Index& idx, const Shape& shape);
// The coordinates of row-major position `linear` in `shape`: each one that is not already a
// constant or a variable is written to a register (`const fusec_idx <prefix>_<d> = ...;`) and
// is that register, ranging over its dim and naming its definition (codegen/index_expr.h).
Index delinearize(KernelBuilder& w, const IndexExpr& linear, const Shape& shape, const std::string& prefix);

class BodyEmitter {
 public:
  // Operand k of the kernel is the pointer `in<k>`, result k is `out<k>`.
  BodyEmitter(const Graph& body, KernelBuilder& w);

  // The register holding `v` at `idx` (emits what computes it, if not already in scope).
  std::string eval(const Value* v, const Index& idx);
  // Whether pointwise value `v` is computed in the hardware form of its op (scalar_ops.h):
  // a bf16/f16 result, or one of the f32 values the .cpp's findRoundedOnly and
  // findLowPrecisionData describe.
  bool hardwareForm(const Value* v) const;
  // What to evaluate to store `v`: its operand where `v` is a cast to its own bf16/f16
  // storage type from a float of its shape, since the store rounds the same way. Evaluating
  // the cast rounded once and then again at the store: two conversions and a shift per
  // element of cross-entropy's gradient, a compute-bound kernel.
  const Value* storedForm(const Value* v) const;
  // `ptr[linearize(idx)] = v at idx`.
  void store(const Value* v, const std::string& ptr, const Index& idx);
  // A reduction's value for the current row/column/scalar, whatever index it is read at.
  void bindReduction(const Value* v, const std::string& reg) { bound_[v] = reg; }
  // The element of body value `input` at row-major position `linear` (spelled as
  // linearize() spells it for the index it is read at) is already in `reg`: a vector or
  // register-array load, or a value an earlier pass computed. An input read directly or
  // through reshapes (which keep the position) comes from there instead of memory. Scoped
  // like the memo.
  void bindElement(const Value* input, const IndexExpr& linear, const std::string& reg);

  // Vector-loop mode (pointwise and multi_tensor kernels): `eval` runs inside an unrolled
  // `for (int j = 0; j < V; ++j)` over the lanes of a vector, at an index whose last
  // coordinate is lane 0's plus j, and reads a body input as one 16-byte-aligned vector per
  // thread wherever codegen/lanes.h proves every lane's element lies in it. The vectors'
  // register arrays are declared through `declarations()`, before the lane loop.
  void beginLanes(int V, const std::string& laneVar);
  void endLanes();
  // `eval` of an output of the vector loop (its lanes: codegen/lanes.h outputLanes) at `idx`,
  // whose last coordinate is lane 0's, `lane0.back()`, plus the lane variable. Through layout
  // ops whose lanes are compile-time offsets of lane 0's (and lane 0 reads the operand), the
  // operand's index is computed once for lane 0, before the lane loop, and each lane's is
  // that plus its constant offset: the divisions of a reshape or RoPE's pairs run once per
  // thread, not once per lane (the RoPE-backward concat kernel spent 3x its memory time on
  // per-lane index arithmetic). Elsewhere the index is computed per lane.
  std::string evalLanes(const Value* v, const Index& idx, const Index& lane0);
  // The declarations of the vector loop ended, handed over (KernelBuilder::insert puts them
  // before the lane loop).
  std::vector<std::unique_ptr<kir::Stmt>> takeDeclarations() { return std::move(laneDecls_); }
  // Evaluate `concat` as its operand k alone, without the per-element branch: the caller has
  // branched once, outside the lane loop, on the coordinate that selects the operand (a
  // vector loop whose vectors never straddle an operand boundary). nullptr: none pinned.
  void pinConcat(const Op* concat, size_t k) { pinned_ = concat, pinnedOperand_ = k; }

  void openScope(const std::string& header);  // a C++ block with its own memo
  void openScope(kir::Stmt scope);            // a loop or branch (kir::) with its own memo
  void closeScope();
  std::string fresh(const std::string& prefix);
  KernelBuilder& writer() { return w_; }
  // The body op as IR-like text for comments: `#3 = mul(#1, #2) : f32[4,8]`.
  std::string describe(const Op& op) const;

 private:
  std::string compute(const Value* v, const Index& idx);
  // `const int <name>[V] = {entries};  // note`: a table the unrolled lane loop indexes by lane.
  std::unique_ptr<kir::Stmt> laneTable(const std::string& name, const std::string& entries, const std::string& note) const;
  const std::string* boundElement(const Value* input, const IndexExpr& linear) const;
  void layoutOperandIndex(KernelBuilder& w, const Op& op, const Index& idx, Index& in);
  // In vector-loop mode, the index of one lane that reads a value, free of the lane variable
  // (computed before the lane loop): every lane's index is this plus a constant offset.
  struct LaneBase {
    int lane = 0;
    Index idx;
  };
  // eval of operand k of op at `idx`, with that operand's lanes in vector-loop mode; `base`
  // is the operand's lane base when known (pointwise ops: the result's).
  std::string evalOperand(const Op& op, size_t k, const Index& idx, std::optional<LaneBase> base);
  std::string evalOperand(const Op& op, size_t k, const Index& idx) { return evalOperand(op, k, idx, laneBase()); }
  // The lane base of the value being evaluated, when known (vector-loop mode only).
  std::optional<LaneBase> laneBase() const;
  // Each lane's index of a value read with `m` whose lane base is `base`.
  Index laneIndex(const LaneBase& base, const LaneMap& m);
  // A layout op's operand index at the result's lane base: computed before the lane loop
  // (once per op and base); returned per lane and as the operand's base.
  std::optional<std::pair<Index, LaneBase>> hoistedOperandIndex(const Op& op, const LaneBase& base);
  // The lanes' vector load of body input `v` at `idx`, if its lanes allow one.
  std::optional<std::string> laneLoad(const Value* v, const Index& idx);

  // Sets roundedOnly_ (body_emitter.cpp says which values).
  void findRoundedOnly();
  // Sets lowPrecisionData_ (body_emitter.cpp says which values).
  void findLowPrecisionData();

  const Graph& body_;
  KernelBuilder& w_;
  std::set<const Value*> roundedOnly_;  // f32 values that reach memory only rounded to bf16/f16
  std::set<const Value*> lowPrecisionData_;  // float values computed from bf16/f16 inputs alone
  std::map<const Op*, int> inputNumber_, position_;
  std::vector<std::map<std::string, std::string>> memo_;  // per scope: key -> register
  std::map<const Value*, std::string> bound_;
  std::set<const Value*> hasBoundElements_;  // values bindElement was called for (any scope)
  int counter_ = 0;
  int laneWidth_ = 0;  // 0: not in vector-loop mode
  std::string laneVar_;
  std::vector<LaneMap> lanes_;  // the lanes of the value being evaluated (innermost last)
  std::vector<std::optional<LaneBase>> bases_;  // the lane base of the same, where known
  std::vector<std::unique_ptr<kir::Stmt>> laneDecls_;  // declarations and lane-base index lines
  std::map<std::string, std::pair<Index, LaneBase>> hoisted_;  // (op, base) -> hoistedOperandIndex
  const Op* pinned_ = nullptr;
  size_t pinnedOperand_ = 0;
};

}  // namespace fusec::codegen
