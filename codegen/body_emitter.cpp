#include "codegen/body_emitter.h"

#include <memory>
#include <set>

#include "codegen/cuda_types.h"
#include "codegen/scalar_ops.h"
#include "ir/printer.h"
#include "ir/type_rules.h"

namespace fusec::codegen {

IndexExpr linearize(const Index& idx, const Shape& shape) {
  std::vector<IndexExpr> terms;  // innermost first, reversed below
  int64_t stride = 1;
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    if (shape[size_t(d)] != 1 && !idx[size_t(d)].isZero())
      terms.push_back(stride == 1 ? idx[size_t(d)] : idx[size_t(d)] * stride);
    stride *= shape[size_t(d)];
  }
  IndexExpr position = 0;
  for (auto t = terms.rbegin(); t != terms.rend(); ++t) position = position + *t;
  return position;
}

Index delinearize(KernelBuilder& w, const IndexExpr& linear, const Shape& shape, const std::string& prefix) {
  Index idx(shape.size(), IndexExpr(0));
  int64_t stride = 1;
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    const int64_t n = shape[size_t(d)];
    if (n != 1) {
      IndexExpr e = stride == 1 ? linear : linear / stride;
      bool outermost = true;  // no dim above with size > 1: the quotient is already in range
      for (int u = 0; u < d; ++u) outermost &= shape[size_t(u)] == 1;
      if (!outermost) e = e % n;
      // A coordinate that is already a variable or a constant needs no register of its own.
      if (e.kind() == IndexExpr::Kind::Var || e.kind() == IndexExpr::Kind::Const) {
        idx[size_t(d)] = e;
      } else {
        const std::string name = prefix + "_" + std::to_string(d);
        w.let("fusec_idx", name, e.str());
        idx[size_t(d)] = IndexExpr::reg(name, e, 0, n - 1);
      }
    }
    stride *= n;
  }
  return idx;
}

BodyEmitter::BodyEmitter(const Graph& body, KernelBuilder& w) : body_(body), w_(w) {
  int k = 0;
  for (Op* in : body.inputs()) inputNumber_[in] = k++;
  for (size_t i = 0; i < body.ops.size(); ++i) position_[body.ops[i].get()] = int(i);
  memo_.emplace_back();
  findRoundedOnly();
  findLowPrecisionData();
}

// A float value computed, inside this body, from bf16/f16 inputs alone (constants, integer
// and boolean operands are exact and do not count; a reduction or a layout op of such values
// is one too).
// Those inputs were rounded to 8 or 11 significant bits where they were made, which moved
// any function of them by about |x| * 2^-8 relative; the hardware exp and division err by
// 2 + 1.2|x| f32 ulps (about |x| * 2^-23), thousands of times less, so their results take the
// fast forms too. Cross-entropy's logsumexp over bf16 logits is the case: its accurate expf
// per logit was a third of the kernel's instructions. An f32 program has no such inputs and
// keeps every accurate form.
void BodyEmitter::findLowPrecisionData() {
  for (const auto& op : body_.ops) {
    if (op->results.size() != 1 || !isFloat(op->result()->type.dtype)) continue;
    if (op->kind == OpKind::Input) {
      if (isReduced(op->result()->type.dtype)) lowPrecisionData_.insert(op->result());
      continue;
    }
    const OpCategory c = op->info().category;
    if (c != OpCategory::Pointwise && c != OpCategory::Reduction && c != OpCategory::Layout) continue;
    bool derived = false, exact = true;
    for (const Value* v : op->operands) {
      if (lowPrecisionData_.count(v)) derived = true;
      else if (isFloat(v->type.dtype) && v->def->kind != OpKind::Constant) exact = false;
    }
    if (derived && exact) lowPrecisionData_.insert(op->result());
  }
}

// A value whose every use is a rounding to bf16/f16 (a cast, or a pointwise op with such a
// result), or a float pointwise op whose result is such a value again, only ever reaches
// memory with 8 or 11 significant bits: its own few-ulp error under the hardware forms of
// exp and division (scalar_ops.h) vanishes in that rounding. Cross-entropy's gradient,
// softmax(x) - onehot in f32 stored as bf16, is the case: its IEEE division per logit made
// the kernel compute-bound. A kernel output, a reduction's operand or a comparison's keeps
// the accurate form. Walked backwards, so uses are classified before their operands.
void BodyEmitter::findRoundedOnly() {
  std::map<const Value*, std::vector<const Op*>> users;
  for (const auto& op : body_.ops)
    for (const Value* v : op->operands) users[v].push_back(op.get());
  std::set<const Value*> outputs(body_.outputs.begin(), body_.outputs.end());
  for (auto it = body_.ops.rbegin(); it != body_.ops.rend(); ++it)
    for (const auto& result : (*it)->results) {
      const Value* r = result.get();
      const auto u = users.find(r);
      if (outputs.count(r) || u == users.end()) continue;
      bool rounded = true;
      for (const Op* use : u->second) {
        const DType d = use->result()->type.dtype;
        rounded &= hasScalarFormula(use->kind) && isFloat(d) && (isReduced(d) || roundedOnly_.count(use->result()));
      }
      if (rounded) roundedOnly_.insert(r);
    }
}

bool BodyEmitter::hardwareForm(const Value* v) const {
  return hasLowPrecisionFormula(v->def->kind) && v->def->kind != OpKind::Cast &&
         (isReduced(v->type.dtype) || roundedOnly_.count(v) || lowPrecisionData_.count(v));
}

std::unique_ptr<kir::Stmt> BodyEmitter::laneTable(const std::string& name, const std::string& entries,
                                                    const std::string& note) const {
  kir::Stmt t = kir::make(kir::StmtKind::Let, name + "[" + std::to_string(laneWidth_) + "]", "int", "{" + entries + "}");
  t.note = note;
  return std::make_unique<kir::Stmt>(std::move(t));
}

std::string BodyEmitter::fresh(const std::string& prefix) { return prefix + std::to_string(counter_++); }

void BodyEmitter::openScope(const std::string& header) {
  w_.open(header);
  memo_.emplace_back();
}

void BodyEmitter::openScope(kir::Stmt scope) {
  w_.open(std::move(scope));
  memo_.emplace_back();
}

constexpr int kExpandDepth = 16;  // registers within registers: more than any chain of reshapes a body holds

// A bound element is keyed by its position with every register expanded to what it holds:
// a read through a reshape of a cast of the input (GPT-2's layernorm backward reads its bf16
// dy as [B*T, C] and its f32 saves as [B, T, C]) reaches the input at coordinates made
// registers of their own, which print differently from the row's binding though they name
// the same element; the element was then loaded again from memory in every pass.
static std::string elementKey(const Value* input, const IndexExpr& linear) {
  return "@" + std::to_string(reinterpret_cast<uintptr_t>(input)) + "|" + linear.expanded(kExpandDepth).str();
}

void BodyEmitter::bindElement(const Value* input, const IndexExpr& linear, const std::string& reg) {
  memo_.back()[elementKey(input, linear)] = reg;
  hasBoundElements_.insert(input);
}

const std::string* BodyEmitter::boundElement(const Value* input, const IndexExpr& linear) const {
  const std::string key = elementKey(input, linear);
  for (auto it = memo_.rbegin(); it != memo_.rend(); ++it) {
    auto m = it->find(key);
    if (m != it->end()) return &m->second;
  }
  return nullptr;
}

void BodyEmitter::closeScope() {
  memo_.pop_back();
  w_.close();
}

std::string BodyEmitter::describe(const Op& op) const {
  // Values as `#<n>` (n: the position of their op in the body, `.<k>` for result k of
  // several), not by name: names differ between the layers' copies of a kernel, and
  // identical kernels must have identical sources to share one cubin.
  auto name = [&](const Value* v) {
    std::string s = "#" + std::to_string(position_.at(v->def));
    return v->def->numResults() > 1 ? s + "." + std::to_string(v->index) : s;
  };
  std::string s;
  for (int i = 0; i < op.numResults(); ++i) s += (i ? ", " : "") + name(op.result(i));
  s += " = " + std::string(op.info().name) + "(";
  for (size_t i = 0; i < op.operands.size(); ++i) s += (i ? ", " : "") + name(op.operands[i]);
  s += ") : " + op.result()->type.str();
  return s;
}

std::string BodyEmitter::eval(const Value* v, const Index& idx) {
  auto b = bound_.find(v);
  if (b != bound_.end()) return b->second;
  // An element the family already holds (a row kernel's registers); inputs check this where
  // they are loaded, after their reshapes.
  if (v->def->kind != OpKind::Input && hasBoundElements_.count(v))
    if (const std::string* r = boundElement(v, linearize(idx, v->type.shape))) return *r;
  std::string key = std::to_string(reinterpret_cast<uintptr_t>(v));
  // Coordinates with their registers expanded: a value reached through another chain of
  // reshapes (a column kernel's full output beside its sum) names the same element.
  for (const auto& d : idx) key += "|" + d.expanded(kExpandDepth).str();
  for (auto it = memo_.rbegin(); it != memo_.rend(); ++it) {
    auto m = it->find(key);
    if (m != it->end()) return m->second;
  }
  std::string reg = compute(v, idx);
  memo_.back()[key] = reg;
  return reg;
}

const Value* BodyEmitter::storedForm(const Value* v) const {
  if (v->def->kind != OpKind::Cast || !isReduced(v->type.dtype)) return v;
  const Value* x = v->def->operands[0];
  return isFloat(x->type.dtype) && x->type.shape == v->type.shape ? x : v;
}

void BodyEmitter::store(const Value* v, const std::string& ptr, const Index& idx) {
  std::string reg = eval(storedForm(v), idx);
  w_.store(ptr, linearize(idx, v->type.shape).str(), storeValue(v->type.dtype, reg));
}

void BodyEmitter::beginLanes(int V, const std::string& laneVar) {
  laneWidth_ = V;
  laneVar_ = laneVar;
  lanes_.clear();
  bases_.clear();
  laneDecls_.clear();
  hoisted_.clear();
}

void BodyEmitter::endLanes() {
  laneWidth_ = 0;
  lanes_.clear();
  bases_.clear();
}

std::string BodyEmitter::evalLanes(const Value* v, const Index& idx, const Index& lane0) {
  lanes_.push_back(outputLanes(v->type.shape, laneWidth_));
  bases_.push_back(lanes_.back().broken ? std::nullopt : std::optional<LaneBase>(LaneBase{0, lane0}));
  std::string r = eval(v, idx);
  bases_.pop_back();
  lanes_.pop_back();
  return r;
}

std::string BodyEmitter::evalOperand(const Op& op, size_t k, const Index& idx, std::optional<LaneBase> base) {
  if (laneWidth_ == 0 || lanes_.empty()) return eval(op.operands[k], idx);
  lanes_.push_back(operandLanes(op, k, lanes_.back(), laneWidth_));
  // A base is only meaningful at a lane that really reads the operand (a concat operand's
  // lane map keeps the offsets of lanes that read other operands: virtual coordinates).
  if (base && (lanes_.back().broken || !lanes_.back().active[size_t(base->lane)])) base.reset();
  bases_.push_back(std::move(base));
  std::string r = eval(op.operands[k], idx);
  bases_.pop_back();
  lanes_.pop_back();
  return r;
}

std::optional<BodyEmitter::LaneBase> BodyEmitter::laneBase() const {
  if (laneWidth_ == 0 || bases_.empty()) return std::nullopt;
  return bases_.back();
}

Index BodyEmitter::laneIndex(const LaneBase& base, const LaneMap& m) {
  Index out = base.idx;
  const size_t b = size_t(base.lane);
  for (size_t d = 0; d < out.size(); ++d) {
    bool zero = true, identity = true;
    for (int j = 0; j < laneWidth_; ++j) {
      if (!m.active[size_t(j)]) continue;
      const int64_t o = m.off[d][size_t(j)] - m.off[d][b];
      zero &= o == 0;
      identity &= o == j - int64_t(b);
    }
    if (zero) continue;
    if (identity) {
      out[d] = (base.idx[d] - int64_t(b)) + IndexExpr::var(laneVar_, 0, laneWidth_ - 1);
      continue;
    }
    std::string offsets;
    for (int j = 0; j < laneWidth_; ++j)
      offsets += (j ? ", " : "") + std::to_string(m.active[size_t(j)] ? m.off[d][size_t(j)] - m.off[d][b] : 0);
    const std::string a = fresh("lo");
    laneDecls_.push_back(laneTable(a, offsets, "lane -> offset"));
    out[d] = base.idx[d] + IndexExpr::var(a + "[" + laneVar_ + "]");
  }
  return out;
}

std::optional<std::pair<Index, BodyEmitter::LaneBase>> BodyEmitter::hoistedOperandIndex(const Op& op, const LaneBase& base) {
  const LaneMap m = operandLanes(op, 0, lanes_.back(), laneWidth_);
  if (m.broken || !m.active[size_t(base.lane)]) return std::nullopt;
  // The lanes that read the operand are part of the key: laneIndex writes offset 0 for the
  // others, so a hoist made under a concat operand's lanes is no hoist for all of them.
  std::string key = std::to_string(reinterpret_cast<uintptr_t>(&op)) + "@" + std::to_string(base.lane) + "/";
  for (bool a : m.active) key += a ? '1' : '0';
  for (const auto& d : base.idx) key += "|" + d.str();
  auto it = hoisted_.find(key);
  if (it == hoisted_.end()) {
    // The base lane's operand index, before the lane loop: its lines go with the declarations.
    KernelBuilder h;
    LaneBase in{base.lane, {}};
    layoutOperandIndex(h, op, base.idx, in.idx);
    for (auto& stmt : h.take()) laneDecls_.push_back(std::move(stmt));
    it = hoisted_.emplace(key, std::make_pair(laneIndex(in, m), in)).first;
  }
  return it->second;
}

std::optional<std::string> BodyEmitter::laneLoad(const Value* v, const Index& idx) {
  if (laneWidth_ == 0 || lanes_.empty() || !isFloat(v->type.dtype)) return std::nullopt;
  const auto read = vectorRead(v->type.shape, lanes_.back(), laneWidth_);
  if (!read) return std::nullopt;
  const std::string V = std::to_string(laneWidth_), a = fresh("a"), o = fresh("vo");
  std::string offsets;
  for (int64_t x : read->voff) offsets += (offsets.empty() ? "" : ", ") + std::to_string(x);
  laneDecls_.push_back(std::make_unique<kir::Stmt>(kir::make(kir::StmtKind::Array, a, "float", V)));
  laneDecls_.push_back(laneTable(o, offsets, "lane -> element of " + a));
  // The first lane that reads this vector loads it: its element's position minus its offset
  // in the vector is the vector's (aligned) start.
  const std::string F = std::to_string(read->firstActive);
  const int64_t back = read->voff[size_t(read->firstActive)];
  w_.use(Helper::VectorIO);
  w_.vectorLoad(laneWidth_, a, "in" + std::to_string(inputNumber_.at(v->def)),
                linearize(idx, v->type.shape).str() + (back ? " - " + std::to_string(back) : ""), laneVar_ + " == " + F,
                describe(*v->def));
  return a + "[" + o + "[" + laneVar_ + "]]";
}

// The operand index that a layout op's result index reads (single-operand layout ops).
void BodyEmitter::layoutOperandIndex(KernelBuilder& w, const Op& op, const Index& idx, Index& in) {
  const Shape& inShape = op.operands[0]->type.shape;
  const Shape& outShape = op.result()->type.shape;
  switch (op.kind) {
    case OpKind::Reshape: {
      // Dims that a reshape keeps at both ends (equal extents: [B*T, D] <-> [B, T, D] keeps D,
      // [B, T, H*d] <-> [B, T, H, d] keeps B and T) pass their index through; only the
      // block between them is linearised and split again. Besides fewer divisions, a vector
      // loop's lane offset on a kept last dim stays out of every division (codegen/lanes.h),
      // so the rest of the index is the same in every lane and computed once.
      size_t pre = 0, suf = 0;
      while (pre < inShape.size() && pre < outShape.size() && inShape[pre] == outShape[pre]) ++pre;
      while (suf < inShape.size() - pre && suf < outShape.size() - pre &&
             inShape[inShape.size() - 1 - suf] == outShape[outShape.size() - 1 - suf])
        ++suf;
      const Shape outMid(outShape.begin() + long(pre), outShape.end() - long(suf));
      const Shape inMid(inShape.begin() + long(pre), inShape.end() - long(suf));
      const Index idxMid(idx.begin() + long(pre), idx.end() - long(suf));
      in.assign(idx.begin(), idx.begin() + long(pre));
      const Index mid = inMid.empty() ? Index{} : delinearize(w, linearize(idxMid, outMid), inMid, fresh("r"));
      in.insert(in.end(), mid.begin(), mid.end());
      in.insert(in.end(), idx.end() - long(suf), idx.end());
      break;
    }
    case OpKind::Permute: {
      const auto& perm = op.attrInts("perm");
      in.assign(inShape.size(), IndexExpr(0));
      for (size_t i = 0; i < perm.size(); ++i) in[size_t(perm[i])] = idx[i];
      break;
    }
    case OpKind::Broadcast: {
      const size_t off = outShape.size() - inShape.size();
      in.assign(inShape.size(), IndexExpr(0));
      for (size_t d = 0; d < inShape.size(); ++d) in[d] = inShape[d] == 1 ? IndexExpr(0) : idx[d + off];
      break;
    }
    case OpKind::Slice: {
      const int ax = normalizeAxis(op.attrInt("axis"), int(inShape.size()), "slice");
      const int64_t start = op.attrInt("start");
      // One element taken: index 0 only, whatever the step (which may be huge).
      const int64_t step = op.result()->type.shape[size_t(ax)] == 1 ? 1 : op.attrInt("step");
      in = idx;
      IndexExpr e = step == 1 ? idx[size_t(ax)] : idx[size_t(ax)] * step;
      e = e + start;
      in[size_t(ax)] = e;
      break;
    }
    default: throw Error("codegen: not a layout op: " + std::string(op.info().name));
  }
}

std::string BodyEmitter::compute(const Value* v, const Index& idx) {
  const Op& op = *v->def;
  const DType dt = v->type.dtype;
  const std::string rt = registerType(dt);
  const std::string comment = "  // " + describe(op);
  switch (op.kind) {
    case OpKind::Input: {
      if (hasBoundElements_.count(v))
        if (const std::string* r = boundElement(v, linearize(idx, v->type.shape))) return *r;
      if (auto r = laneLoad(v, idx)) return *r;
      std::string reg = fresh("x");
      w_.load(rt, reg, dt, "in" + std::to_string(inputNumber_.at(&op)), linearize(idx, v->type.shape).str(), describe(op));
      return reg;
    }
    case OpKind::Constant: return literal(dt, op.attrFloat("value"));
    case OpKind::Iota: {
      const int ax = normalizeAxis(op.attrInt("axis"), v->type.rank(), "iota");
      return "((" + rt + ")" + idx[size_t(ax)].str() + ")";
    }
    case OpKind::Reshape: {
      const Value* src = op.operands[0];
      while (src->def->kind == OpKind::Reshape) src = src->def->operands[0];
      if (src->def->kind == OpKind::Input && hasBoundElements_.count(src))
        if (const std::string* r = boundElement(src, linearize(idx, v->type.shape))) return *r;
      [[fallthrough]];
    }
    case OpKind::Permute:
    case OpKind::Broadcast:
    case OpKind::Slice: {
      if (auto b = laneBase())
        if (auto h = hoistedOperandIndex(op, *b)) return evalOperand(op, 0, h->first, h->second);
      Index in;
      layoutOperandIndex(w_, op, idx, in);
      return evalOperand(op, 0, in, std::nullopt);
    }
    case OpKind::Concat: {
      // Each operand is read only inside its own branch: the others' indices are out of
      // range there. A pinned concat has no branch (pinConcat). In a vector loop where lane
      // 0's coordinate along the axis is known exactly (RoPE's pairs: even lanes read the
      // first operand), each lane's operand is a compile-time constant: the branch tests a
      // constant table, which the unrolled loop folds away.
      const int ax = normalizeAxis(op.attrInt("axis"), v->type.rank(), "concat");
      std::string reg = fresh("c");
      w_.line(rt + " " + reg + ";" + comment);
      std::string laneOperand;  // name of the lane -> operand table, if known
      if (laneWidth_ != 0 && !lanes_.empty() && !lanes_.back().broken && lanes_.back().g[size_t(ax)] == 0) {
        const LaneMap& M = lanes_.back();
        std::string table;
        for (int j = 0; j < laneWidth_; ++j) {
          const int64_t c = M.r[size_t(ax)] + M.off[size_t(ax)][size_t(j)];
          int64_t k = 0, end = 0;
          while (k < int64_t(op.operands.size()) && c >= (end += op.operands[size_t(k)]->type.shape[size_t(ax)])) ++k;
          // A lane that does not read this value (or lies outside it) takes any branch.
          if (!M.active[size_t(j)] || k == int64_t(op.operands.size())) k = 0;
          table += (j ? ", " : "") + std::to_string(k);
        }
        laneOperand = fresh("lk");
        laneDecls_.push_back(laneTable(laneOperand, table, "lane -> operand of " + describe(op).substr(0, describe(op).find(" ="))));
      }
      int64_t start = 0;
      for (size_t k = 0; k < op.operands.size(); ++k) {
        const int64_t end = start + op.operands[k]->type.shape[size_t(ax)];
        if (&op == pinned_ && k != pinnedOperand_) {
          start = end;
          continue;
        }
        const bool last = k + 1 == op.operands.size();
        std::string cond = laneOperand.empty() ? idx[size_t(ax)].str() + " < " + std::to_string(end)
                                               : laneOperand + "[" + laneVar_ + "] == " + std::to_string(k);
        const bool branch = &op != pinned_;
        if (branch) openScope(k == 0 ? "if (" + cond + ")" : last ? "else" : "else if (" + cond + ")");
        Index in = idx;
        // Inside this branch the coordinate lies in the operand's part of the axis.
        in[size_t(ax)] = idx[size_t(ax)].within(start, end - 1) - start;
        // The operand's base: the result's, moved to the first lane that reads this operand
        // when the result's base lane reads another one.
        std::optional<LaneBase> base = laneBase();
        if (base) {
          const LaneMap& M = lanes_.back();
          const LaneMap m = operandLanes(op, k, M, laneWidth_);
          int f = base->lane;
          for (int j = 0; !m.broken && !m.active[size_t(f)] && j < laneWidth_; ++j)
            if (m.active[size_t(j)]) f = j;
          for (size_t d = 0; d < base->idx.size(); ++d)
            base->idx[d] = base->idx[d] + (M.off[d][size_t(f)] - M.off[d][size_t(base->lane)]);
          base->lane = f;
          base->idx[size_t(ax)] = base->idx[size_t(ax)] - start;
        }
        w_.line(reg + " = " + evalOperand(op, k, in, base) + ";");
        if (branch) closeScope();
        start = end;
      }
      return reg;
    }
    case OpKind::Gather: {
      const int ax = normalizeAxis(op.attrInt("axis"), v->type.rank(), "gather");
      std::string at = evalOperand(op, 1, idx);
      Index in = idx;
      in[size_t(ax)] = IndexExpr::var("(fusec_idx)" + at);
      return evalOperand(op, 0, in, std::nullopt);  // lanes read rows the data chose
    }
    case OpKind::Sum:
    case OpKind::Mean:
    case OpKind::RMax:
    case OpKind::RMin: {
      // Reached only for reductions the family did not bind: those over size-1 dims alone,
      // which are copies (a mean over one element is that element).
      const Shape& in = op.operands[0]->type.shape;
      std::vector<bool> red(in.size(), false);
      for (int64_t a : op.attrInts("axes")) red[size_t(normalizeAxis(a, int(in.size()), "reduction"))] = true;
      Index i;
      size_t next = 0;
      for (size_t d = 0; d < in.size(); ++d) {
        if (in[d] != 1 && red[d]) throw Error("codegen: reduction '" + describe(op) + "' is not bound in kernel '" + body_.name + "'");
        const bool kept = !red[d] || op.attrBool("keepdim");
        i.push_back(red[d] ? IndexExpr(0) : idx[next]);
        if (kept) ++next;
      }
      return evalOperand(op, 0, i, std::nullopt);
    }
    default: break;
  }
  if (!hasScalarFormula(op.kind))
    throw Error("codegen: cannot evaluate '" + std::string(op.info().name) + "' at a point in kernel '" + body_.name + "'");
  std::vector<std::string> args;
  for (size_t k = 0; k < op.operands.size(); ++k) args.push_back(evalOperand(op, k, idx));
  std::string reg = fresh("t");
  // A cast to bf16/f16 rounds (the program asked for it). Other bf16/f16 intermediates stay
  // in f32 registers and are rounded only where they are stored (see kernel_abi.h).
  if (op.kind == OpKind::Cast) {
    w_.let(rt, reg, roundTo(dt, "(" + rt + ")(" + args[0] + ")"), describe(op));
  } else {
    if (const std::optional<Helper> h = helperOf(op.kind)) w_.use(*h);
    w_.let(rt, reg, "(" + rt + ")(" + scalarFormula(op.kind, args, hardwareForm(op.result())) + ")", describe(op));
  }
  return reg;
}

}  // namespace fusec::codegen
