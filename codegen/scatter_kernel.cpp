// scatter_add (the embedding gradient), deterministic: every output element is summed by one
// thread in source order, so two runs give bit-identical results (atomicAdd would make the
// order of the additions to a repeated token's row vary run to run).
//
// Design: the result is viewed as [A, D, B] (D: the scatter axis, e.g. the vocabulary; B:
// the dims after it, e.g. d_model) and the source as [A, S, B] (S: the tokens). One warp owns
// an output row (a, v): its lanes hold the row's B columns in registers (starting from the
// base), walk the source along S in order 32 positions at a time, find the positions whose
// index is v with one ballot, and add those source rows (coalesced across lanes). This keeps
// A*D warps busy (10000 for the vocabulary), reads each source row once overall, fuses the
// base copy (one launch, every output written exactly once) and costs about what the
// atomic version did: the ids (a few KB, L1-resident) are scanned once per row, 32 per
// instruction. The ballot needs the index to be one value per (a, s), i.e. a broadcast
// along B (an embedding's ids); otherwise each lane compares its own columns' indices,
// position by position (still deterministic; the pipeline does not produce such scatters).
#include <algorithm>

#include "codegen/cuda_types.h"
#include "codegen/family_emitters.h"
#include "ir/type_rules.h"

namespace fusec::codegen {

namespace {

constexpr int64_t kMaxColumnsPerPass = 2048;  // 64 accumulators per lane
constexpr int64_t kStage = 2048;              // indices staged in shared memory at a time
constexpr int kStagedWarps = 16;              // rows (warps) of a staged block; kStage / 16 ids per slice

// True when `index` (of the source's shape) is the same for every position of the dims
// after `axis`: a broadcast whose operand has size 1 (or no dim) there.
bool indexIsPerRow(const Value* index, int axis) {
  const Shape& s = index->type.shape;
  bool trivial = true;
  for (size_t d = size_t(axis) + 1; d < s.size(); ++d) trivial &= s[d] == 1;
  if (trivial) return true;
  const Op& op = *index->def;
  if (op.kind != OpKind::Broadcast) return false;
  const Shape& in = op.operands[0]->type.shape;
  const int off = int(s.size() - in.size());
  for (int d = axis + 1; d < int(s.size()); ++d)
    if (d - off >= 0 && in[size_t(d - off)] != 1) return false;
  return true;
}

int64_t product(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t d = from; d < to; ++d) p *= s[d];
  return p;
}

// The full index of [A..., x, B...] from delinearized A and B parts and the axis entry.
Index join(const Index& a, const std::string& x, const Index& b) {
  Index out = a;
  out.push_back(x);
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

}  // namespace

std::vector<Launch> emitScatter(const FamilyInput& k, CodeWriter& w) {
  const Op* scatter = nullptr;
  for (auto& op : k.body.ops)
    if (op->kind == OpKind::ScatterAdd) scatter = op.get();
  const Value* result = scatter->result();
  const Value *base = scatter->operands[0], *index = scatter->operands[1], *src = scatter->operands[2];
  std::vector<int> scatterOuts, srcOuts;
  for (size_t i = 0; i < k.body.outputs.size(); ++i) {
    const Value* o = k.body.outputs[i];
    if (o == result) scatterOuts.push_back(int(i));
    else if (o->type.numel() == src->type.numel()) srcOuts.push_back(int(i));
    else throw Error("codegen: scatter kernel '" + k.body.name + "' has an output that is neither the scatter nor of its source's size");
  }
  const Shape& shape = result->type.shape;
  const int ax = normalizeAxis(scatter->attrInt("axis"), result->type.rank(), "scatter_add");
  const Shape outer(shape.begin(), shape.begin() + ax), inner(shape.begin() + ax + 1, shape.end());
  const int64_t D = shape[size_t(ax)], S = src->type.shape[size_t(ax)], B = product(shape, size_t(ax) + 1, shape.size());
  const int64_t rows = product(shape, 0, size_t(ax)) * D;
  const int64_t passes = (B + kMaxColumnsPerPass - 1) / kMaxColumnsPerPass, perPass = (B + passes - 1) / passes;
  const int64_t Q = (perPass + 31) / 32;
  const bool ballot = indexIsPerRow(index, ax);
  const std::string rt = registerType(result->type.dtype), sB = std::to_string(B), sP = std::to_string(perPass);

  // With one scatter row group (no dims before the axis: an embedding) the block's warps own
  // kStagedWarps consecutive rows and scan the same indices: the block stages them in shared
  // memory, kStage at a time. Each warp then ballots over its own slice of the stage only,
  // listing the positions whose index falls in the block's rows (a few per stage), and every
  // warp walks those lists in slice order, adding the positions of its own row. Each warp
  // reading all 16,384 ids of small at batch 64 from global memory itself (128 KB each, 10,000
  // warps) ran at 6% of the copy bandwidth; each warp ballotting over the whole stage, at 12%
  // (0.166 ms, H200), bound by those 16,384 / 32 ballots per warp.
  const bool staged = ballot && product(shape, 0, size_t(ax)) == 1;
  const int block = staged ? 32 * kStagedWarps : kBlock;
  k.signature(w, k.name, block, 0);
  BodyEmitter e(k.body, w);
  w.line("// a warp per output row of " + std::to_string(B) + " columns, " + std::to_string(D) + " rows along the axis, " +
         std::to_string(S) + " source positions scanned in order" + (staged ? " (staged in shared memory)" : ""));
  w.line("const int lane = threadIdx.x % 32;");
  if (staged) {
    w.line("__shared__ fusec_idx ids[" + std::to_string(kStage) + "];");
    w.line("__shared__ short hits[" + std::to_string(kStagedWarps) + "][" + std::to_string(kStage / kStagedWarps) +
           "];  // per warp slice: the stage positions of the block's rows, in order");
    w.line("__shared__ int hitCount[" + std::to_string(kStagedWarps) + "];");
    // Every warp of the block runs the same trip count: the staging synchronises the block.
    e.openScope("for (fusec_idx row0 = (fusec_idx)blockIdx.x * (blockDim.x / 32); row0 < " + std::to_string(rows) +
                "; row0 += (fusec_idx)gridDim.x * (blockDim.x / 32))");
    w.line("const fusec_idx row = row0 + threadIdx.x / 32;");
    w.line("const bool live = row < " + std::to_string(rows) + ";");
  } else {
    e.openScope("for (fusec_idx row = ((fusec_idx)blockIdx.x * blockDim.x + threadIdx.x) / 32; row < " +
                std::to_string(rows) + "; row += (fusec_idx)gridDim.x * blockDim.x / 32)");
  }
  w.line("const fusec_idx v = row % " + std::to_string(D) + ";");
  const Index a = delinearize(w, "(row / " + std::to_string(D) + ")", outer, "a");
  if (passes > 1) e.openScope("for (fusec_idx b0 = 0; b0 < " + sB + "; b0 += " + sP + ")");
  const std::string b0 = passes > 1 ? "b0 + " : "";
  // Column q of this lane, and whether it exists in this pass.
  auto column = [&](const std::string& q) {
    w.line("const fusec_idx b = " + b0 + "lane + 32 * " + q + ";");
    return "b < " + sB + (passes > 1 && Q * 32 > perPass ? " && lane + 32 * " + q + " < " + sP : "");
  };
  w.line(rt + " acc[" + std::to_string(Q) + "];");
  w.line("// " + e.describe(*scatter) + ": base");
  w.line("#pragma unroll");
  e.openScope("for (int q = 0; q < " + std::to_string(Q) + "; ++q)");
  {
    const std::string in = column("q");
    e.openScope("if (" + std::string(staged ? "live && " : "") + in + ")");
    w.line("acc[q] = " + e.eval(base, join(a, "v", delinearize(w, "b", inner, "ob"))) + ";");
    e.closeScope();
  }
  e.closeScope();
  auto addRow = [&](const std::string& s) {
    w.line("#pragma unroll");
    e.openScope("for (int q = 0; q < " + std::to_string(Q) + "; ++q)");
    const std::string in = column("q");
    const Index bi = delinearize(w, "b", inner, "sb");
    e.openScope("if (" + in + ")");
    if (!ballot) e.openScope("if ((fusec_idx)" + e.eval(index, join(a, s, bi)) + " == v)");
    w.line("acc[q] += " + e.eval(src, join(a, s, bi)) + ";");
    if (!ballot) e.closeScope();
    e.closeScope();
    e.closeScope();
  };
  if (staged) {
    const std::string sS = std::to_string(S), K = std::to_string(kStage);
    e.openScope("for (fusec_idx t0 = 0; t0 < " + sS + "; t0 += " + K + ")");
    w.line("__syncthreads();  // the previous stage's readers are done");
    e.openScope("for (int t = threadIdx.x; t < " + K + " && t0 + t < " + sS + "; t += blockDim.x)");
    w.line("const fusec_idx s = t0 + t;");
    w.line("ids[t] = (fusec_idx)" + e.eval(index, join(a, "s", Index(inner.size(), "0"))) + ";");
    e.closeScope();
    w.line("__syncthreads();");
    const std::string SL = std::to_string(kStage / kStagedWarps), NW = std::to_string(kStagedWarps);
    w.line("int found = 0;");
    e.openScope("for (int s1 = (threadIdx.x / 32) * " + SL + "; s1 < (threadIdx.x / 32 + 1) * " + SL + "; s1 += 32)");
    w.line("const bool hit = t0 + s1 + lane < " + sS + " && (unsigned)(ids[s1 + lane] - row0) < " + NW + "u;");
    w.line("const unsigned m = __ballot_sync(0xffffffffu, hit);");
    w.line("if (hit) hits[threadIdx.x / 32][found + __popc(m & ((1u << lane) - 1u))] = (short)(s1 + lane);");
    w.line("found += __popc(m);");
    e.closeScope();
    w.line("if (lane == 0) hitCount[threadIdx.x / 32] = found;");
    w.line("__syncthreads();");
    w.line("// the matching positions in increasing order (slices in order): a fixed order of the additions");
    e.openScope("for (int g = 0; live && g < " + NW + "; ++g)");
    e.openScope("for (int h = 0; h < hitCount[g]; ++h)");
    w.line("const int s1 = hits[g][h];");
    e.openScope("if (ids[s1] == v)");
    w.line("const fusec_idx s = t0 + s1;");
    addRow("s");
    e.closeScope();
    e.closeScope();
    e.closeScope();
    e.closeScope();
  } else if (ballot) {
    e.openScope("for (fusec_idx s0 = 0; s0 < " + std::to_string(S) + "; s0 += 32)");
    w.line("bool hit = false;");
    e.openScope("if (s0 + lane < " + std::to_string(S) + ")");
    w.line("const fusec_idx s = s0 + lane;");
    w.line("hit = (fusec_idx)" + e.eval(index, join(a, "s", Index(inner.size(), "0"))) + " == v;");
    e.closeScope();
    w.line("// the matching positions in increasing order: a fixed order of the additions");
    e.openScope("for (unsigned m = __ballot_sync(0xffffffffu, hit); m != 0; m &= m - 1)");
    w.line("const fusec_idx s = s0 + __ffs(m) - 1;");
    addRow("s");
    e.closeScope();
    e.closeScope();
  } else {
    e.openScope("for (fusec_idx s = 0; s < " + std::to_string(S) + "; ++s)");
    addRow("s");
    e.closeScope();
  }
  w.line("#pragma unroll");
  e.openScope("for (int q = 0; q < " + std::to_string(Q) + "; ++q)");
  {
    const std::string in = column("q");
    e.openScope("if (" + std::string(staged ? "live && " : "") + in + ")");
    const Index o = join(a, "v", delinearize(w, "b", inner, "wb"));
    for (int out : scatterOuts)
      w.line("out" + std::to_string(out) + "[" + linearize(o, shape) + "] = " + storeValue(result->type.dtype, "acc[q]") + ";");
    e.closeScope();
  }
  e.closeScope();
  if (passes > 1) e.closeScope();
  e.closeScope();
  if (!srcOuts.empty()) {
    w.line("// the source's own outputs, element by element");
    e.openScope("for (fusec_idx i = (fusec_idx)blockIdx.x * blockDim.x + threadIdx.x; i < " +
                std::to_string(src->type.numel()) + "; i += (fusec_idx)gridDim.x * blockDim.x)");
    for (int o : srcOuts) {
      const Value* v = k.body.outputs[size_t(o)];
      e.store(v, "out" + std::to_string(o), delinearize(w, "i", v->type.shape, "p" + std::to_string(o)));
    }
    e.closeScope();
  }
  w.close();
  const int64_t grid = std::clamp<int64_t>((rows * 32 + block - 1) / block, 1, 65535);
  return {Launch{k.name, {uint32_t(grid), 1, 1}, {uint32_t(block), 1, 1}, 0}};
}

}  // namespace fusec::codegen
