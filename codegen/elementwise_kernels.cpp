// pointwise and multi_tensor: grid-stride loops over output elements.
#include <algorithm>
#include <map>
#include <set>

#include "codegen/cuda_types.h"
#include "codegen/family_emitters.h"
#include "codegen/vector_io.h"
#include "ir/type_rules.h"

namespace fusec::codegen {

uint32_t elementGrid(int64_t n, const Target& t) {
  const int64_t full = int64_t(t.sms) * t.threadsPerSm / kBlock;
  return uint32_t(std::clamp<int64_t>((n + kBlock - 1) / kBlock, 1, full));
}

namespace {

// multi_tensor chains: outputs that read a common non-scalar kernel operand (one parameter's
// p, grad, moments and bf16 copy) form one chain; chains sharing nothing but scalars (the
// step) and constants are independent, each with its own block range. Splitting by
// parameter rather than by shape keeps a vectorised chain's registers to one parameter's
// arrays: Q, K and V's updates in one chain of 8-wide arrays spilled to local memory.
// A slice of an input counts as an input of its own: Q, K and V each read their own rows of
// the merged QKV weight's gradient, and as one chain (three parameters' arrays, 128
// registers, a quarter of the SM's warps) their update ran at 76% of the copy bandwidth.
std::vector<std::pair<int64_t, std::vector<int>>> independentChains(const Graph& body) {
  std::map<const Value*, std::set<const Value*>> reads;  // value -> non-scalar inputs it reads
  auto isTensorInput = [](const Value* v) { return v->def->kind == OpKind::Input && v->type.numel() > 1; };
  for (const auto& op : body.ops) {
    std::set<const Value*> r;
    if (isTensorInput(op->result())) r.insert(op->result());
    if (op->kind == OpKind::Slice && isTensorInput(op->operands[0])) {
      reads[op->result()] = {op->result()};
      continue;
    }
    for (const Value* v : op->operands)
      if (auto it = reads.find(v); it != reads.end()) r.insert(it->second.begin(), it->second.end());
    for (const auto& res : op->results) reads[res.get()] = r;
  }
  const size_t n = body.outputs.size();
  std::vector<size_t> parent(n);
  for (size_t i = 0; i < n; ++i) parent[i] = i;
  auto root = [&](size_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  std::map<const Value*, size_t> firstReader;
  for (size_t k = 0; k < n; ++k)
    for (const Value* in : reads[body.outputs[k]]) {
      auto [it, fresh] = firstReader.emplace(in, k);
      if (!fresh) parent[root(k)] = root(it->second);
    }
  std::vector<std::pair<int64_t, std::vector<int>>> groups;
  std::map<std::pair<size_t, int64_t>, size_t> groupOf;  // (chain, element count) -> group
  for (size_t k = 0; k < n; ++k) {
    const int64_t count = body.outputs[k]->type.numel();
    auto [it, fresh] = groupOf.emplace(std::make_pair(root(k), count), groups.size());
    if (fresh) groups.push_back({count, {}});
    groups[it->second].second.push_back(int(k));
  }
  return groups;
}

// How a loop over one group of outputs is vectorised: V consecutive elements per thread when
// every output has one shape whose innermost extent V divides (so a vector never crosses a
// row and shares the outer index), with 16-byte loads of the inputs whose lanes allow one
// (codegen/lanes.h: read in place, or through slices, concats, permutes and reshapes that
// keep each vector's elements in one aligned vector) and 16-byte stores of the float
// outputs. V = 1: scalar only.
struct VectorPlan {
  int width = 1;
  std::vector<const Value*> inputs;  // loaded as vectors somewhere
  std::vector<int> outputs;          // stored as vectors (the others element by element)
};

VectorPlan planVectors(const Graph& body, const std::vector<int>& outs) {
  VectorPlan plan;
  const Shape& shape = body.outputs[size_t(outs.at(0))]->type.shape;
  std::vector<const Value*> roots;
  for (int k : outs) {
    if (body.outputs[size_t(k)]->type.shape != shape) return plan;
    roots.push_back(body.outputs[size_t(k)]);
  }
  std::vector<DType> dtypes;
  for (const Op* in : body.inputs())
    if (isFloat(in->result()->type.dtype) && in->result()->type.numel() > 1) dtypes.push_back(in->result()->type.dtype);
  for (int k : outs)
    if (isFloat(body.outputs[size_t(k)]->type.dtype)) {
      plan.outputs.push_back(k);
      dtypes.push_back(body.outputs[size_t(k)]->type.dtype);
    }
  const int v = vectorWidth(dtypes);
  if (v > 1 && !shape.empty() && shape.back() % v == 0) {
    plan.width = v;
    plan.inputs = vectorInputs(body, roots, v);
  }
  return plan;
}

// A grid-stride loop over n elements run by `blocks` blocks starting at block `base`
// (a multi_tensor chain; base 0 and all blocks for a pointwise kernel). Every output in
// `outs` is written at the element with its own shape's row-major position.
void scalarLoop(BodyEmitter& e, const Graph& body, const std::vector<int>& outs, int64_t n, const std::string& block,
                const std::string& blocks) {
  e.openScope(kir::gridStrideLoop("i", n, block, blocks));
  std::map<Shape, Index> idxOf;  // outputs of one shape share the index (and the values)
  for (int k : outs) {
    const Shape& s = body.outputs[size_t(k)]->type.shape;
    if (!idxOf.count(s)) idxOf[s] = delinearize(e.writer(), IndexExpr::var("i", 0, n - 1), s, "o" + std::to_string(idxOf.size()));
    e.store(body.outputs[size_t(k)], "out" + std::to_string(k), idxOf[s]);
  }
  e.closeScope();
}

// A concat that a vector loop branches on once per thread, outside its lane loop, instead of
// per element inside it: one that every output reaches only through pointwise ops (so it is
// read at the output's index) and whose operand boundaries no vector straddles. Otherwise the
// index arithmetic of every operand (RoPE-backward's head merge of dq, dk and dv) is
// computed by each thread before the lane loop, though a thread reads only one operand.
const Op* splittableConcat(const Graph& body, const std::vector<int>& outs, int V) {
  std::set<const Value*> direct, other;  // reached only through pointwise ops / otherwise
  std::vector<std::pair<const Value*, bool>> stack;
  for (int k : outs) stack.push_back({body.outputs[size_t(k)], true});
  std::vector<const Op*> order;
  while (!stack.empty()) {
    auto [v, same] = stack.back();
    stack.pop_back();
    if (!(same ? direct : other).insert(v).second) continue;
    const Op& op = *v->def;
    if (same && op.kind == OpKind::Concat) order.push_back(&op);
    const bool keeps = op.info().category == OpCategory::Pointwise;
    for (const Value* u : op.operands) stack.push_back({u, same && keeps});
  }
  for (const Op* c : order) {
    if (other.count(c->result())) continue;
    const Shape& shape = c->result()->type.shape;
    const size_t ax = size_t(normalizeAxis(c->attrInt("axis"), int(shape.size()), "concat"));
    bool aligned = true;
    for (const Value* u : c->operands) aligned &= ax + 1 != shape.size() || u->type.shape[ax] % V == 0;
    if (aligned) return c;
  }
  return nullptr;
}

// The extent along `ax` of each operand of concat c when they are all the same and every output
// is the concat's shape (so an output element and the concat's element share their index); 0
// otherwise.
int64_t equalPartExtent(const Op& c, size_t ax, const Graph& body, const std::vector<int>& outs) {
  const int64_t part = c.operands.at(0)->type.shape[ax];
  for (const Value* u : c.operands)
    if (u->type.shape[ax] != part) return 0;
  for (int k : outs)
    if (body.outputs[size_t(k)]->type.shape != c.result()->type.shape) return 0;
  return part;
}

// The vector path's body for one thread's vector at `first` (lane 0's output index), whose
// linear position in the outputs is `at`: the lane loop, its declarations before it, and the
// vector stores.
void laneLoop(BodyEmitter& e, const Graph& body, const std::vector<int>& outs, const VectorPlan& plan, const Index& first,
              const std::string& at) {
  KernelBuilder& w = e.writer();
  const std::string V = std::to_string(plan.width);
  const KernelBuilder::Mark declarations = w.mark();
  for (int k : plan.outputs) w.array("float", "s" + std::to_string(k), V);
  e.beginLanes(plan.width, "j");
  e.openScope(kir::laneLoop("j", plan.width));
  Index lane = first;
  lane.back() = first.back() + IndexExpr::var("j", 0, plan.width - 1);
  for (int k : outs) {
    const Value* o = body.outputs[size_t(k)];
    const std::string value = e.evalLanes(e.storedForm(o), lane, first);
    if (std::count(plan.outputs.begin(), plan.outputs.end(), k)) w.assign("s" + std::to_string(k) + "[j]", value);
    else w.store("out" + std::to_string(k), linearize(lane, o->type.shape).str(), storeValue(o->type.dtype, value));
  }
  e.closeScope();
  w.insert(declarations, e.takeDeclarations());
  e.endLanes();
  w.use(Helper::VectorIO);
  for (int k : plan.outputs) w.store("out" + std::to_string(k), at, "s" + std::to_string(k), plan.width);
}

// The loop over n elements: with a vector plan, the vector path when every vectorised
// pointer is 16-byte aligned and the scalar loop otherwise (one uniform branch). n is a
// multiple of the width (the innermost extent is), so the vector path has no tail.
void elementLoop(BodyEmitter& e, const Graph& body, const std::vector<int>& outs, const VectorPlan& plan, int64_t n,
                 const std::string& block, const std::string& blocks) {
  if (plan.width == 1) return scalarLoop(e, body, outs, n, block, blocks);
  KernelBuilder& w = e.writer();
  const std::string V = std::to_string(plan.width);
  const Shape& shape = body.outputs[size_t(outs[0])]->type.shape;
  std::vector<std::string> pointers;
  for (const Value* in : plan.inputs) pointers.push_back(inputPointer(body, in));
  for (int k : plan.outputs) pointers.push_back("out" + std::to_string(k));
  e.openScope(kir::ifThen(alignedTest(pointers)));
  const Op* c = splittableConcat(body, outs, plan.width);
  const size_t ax = c ? size_t(normalizeAxis(c->attrInt("axis"), int(shape.size()), "concat")) : 0;
  // A concat of equal parts (SwiGLU's backward: the gradients of both halves of the up
  // projection, from the same elements of both halves and of dh): each thread's vector is a
  // position in one part, and the thread computes that position of every part in turn. A
  // thread per output vector instead reads the shared inputs once per part from memory, half
  // a row apart in time; here the second part's reads of them hit the cache.
  const int64_t part = c ? equalPartExtent(*c, ax, body, outs) : 0;
  const int64_t parts = part ? int64_t(c->operands.size()) : 1;
  Shape loopShape = shape;  // what one thread's vector position ranges over
  if (part) loopShape[ax] = part;
  w.comment(V + " consecutive elements per thread" +
            (part ? " in each of " + std::to_string(parts) + " equal concat parts" : std::string()) +
            ": 16-byte loads and stores");
  e.openScope(kir::gridStrideLoop("v", n / parts / plan.width, block, blocks));
  w.let("fusec_idx", "i", "v * " + V);
  const Index first = delinearize(w, IndexExpr::var("i", 0, n / parts - 1), loopShape, "o");
  if (part) {
    for (int64_t k = 0; k < parts; ++k) {
      e.openScope("");
      e.pinConcat(c, size_t(k));
      Index inPart = first;  // lane 0's coordinate along the axis, in part k
      if (k) inPart[ax] = (first[ax] + IndexExpr(k * part)).within(k * part, (k + 1) * part - 1);
      laneLoop(e, body, outs, plan, inPart, linearize(inPart, shape).str());
      e.pinConcat(nullptr, 0);
      e.closeScope();
    }
  } else if (c) {
    int64_t end = 0;
    for (size_t k = 0; k < c->operands.size(); ++k) {
      const int64_t start = end;
      end += c->operands[k]->type.shape[ax];
      const std::string cond = first[ax].str() + " < " + std::to_string(end);
      e.openScope(k == 0 ? kir::ifThen(cond) : kir::elseIf(k + 1 == c->operands.size() ? "" : cond));
      e.pinConcat(c, k);
      Index inBranch = first;  // lane 0's coordinate along the axis lies in operand k's part
      inBranch[ax] = first[ax].within(start, end - 1);
      laneLoop(e, body, outs, plan, inBranch, "i");
      e.pinConcat(nullptr, 0);
      e.closeScope();
    }
  } else {
    laneLoop(e, body, outs, plan, first, "i");
  }
  e.closeScope();
  e.closeScope();
  e.openScope(kir::elseIf(""));
  scalarLoop(e, body, outs, n, block, blocks);
  e.closeScope();
}

}  // namespace

std::vector<Launch> emitPointwise(const FamilyInput& k, KernelBuilder& w) {
  const int64_t n = k.body.outputs.at(0)->type.numel();
  std::vector<int> outs(k.body.outputs.size());
  for (size_t i = 0; i < outs.size(); ++i) outs[i] = int(i);
  const VectorPlan plan = planVectors(k.body, outs);
  k.signature(w, k.name, kBlock, 0);
  BodyEmitter e(k.body, w);
  elementLoop(e, k.body, outs, plan, n, "blockIdx.x", "gridDim.x");
  w.close();
  return {Launch{k.name, {elementGrid(n / plan.width, k.target), 1, 1}, {uint32_t(kBlock), 1, 1}, 0}};
}

std::vector<Launch> emitMultiTensor(const FamilyInput& k, KernelBuilder& w) {
  // One launch for every chain: chain c owns the blocks [first_c, first_c + blocks_c).
  auto groups = independentChains(k.body);
  k.signature(w, k.name, kBlock, 0);
  BodyEmitter e(k.body, w);
  int64_t first = 0;
  for (size_t c = 0; c < groups.size(); ++c) {
    const VectorPlan plan = planVectors(k.body, groups[c].second);
    const int64_t blocks = elementGrid(groups[c].first / plan.width, k.target), end = first + blocks;
    w.comment("chain " + std::to_string(c) + ": " + std::to_string(groups[c].first) + " elements, blocks [" +
              std::to_string(first) + ", " + std::to_string(end) + ")");
    const std::string inChain = "blockIdx.x < " + std::to_string(end) + "u";
    e.openScope(c ? kir::elseIf(inChain) : kir::ifThen(inChain));
    elementLoop(e, k.body, groups[c].second, plan, groups[c].first, "blockIdx.x - " + std::to_string(first) + "u",
                std::to_string(blocks));
    e.closeScope();
    first = end;
  }
  w.close();
  return {Launch{k.name, {uint32_t(first), 1, 1}, {uint32_t(kBlock), 1, 1}, 0}};
}

}  // namespace fusec::codegen
