// scatter_add (the embedding gradient), deterministic: every output element is summed by one
// thread in source order, so two runs give bit-identical results (atomicAdd would make the
// order of the additions to a repeated token's row vary run to run).
//
// Design: the result is viewed as [A, D, B] (D: the scatter axis, e.g. the vocabulary; B:
// the dims after it, e.g. d_model) and the source as [A, S, B] (S: the tokens). One warp owns
// an output row (a, v) at a time: its lanes hold the row's B columns in registers (starting
// from the base), add the source rows whose index is v in position order (coalesced across
// lanes), and write the row once. Every output is written exactly once, the base copy is
// fused, and each source row is read once overall. How a warp finds its positions:
// - an embedding (A = 1, one index per position): block b owns a range of rows, scans the
//   ids once and lists its rows' positions in shared memory (see `ranged` below); where
//   every position fits the list, it sorts the list by row and sums a row of many positions
//   in segments over several warps (`csr`: skewed, text-like ids);
// - one index per position with A > 1: each warp ballots over its batch entry's ids, 32 at
//   a time;
// - otherwise each lane compares its own columns' indices, position by position (still
//   deterministic; the pipeline does not produce such scatters).
// An epilogue (fusion/plan.cpp: the embedding's AdamW update) is evaluated where the row's
// sums are complete, in registers: the kernel then writes the update's outputs, and the
// table itself (the dense gradient) never reaches memory.
#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "codegen/cuda_types.h"
#include "codegen/family_emitters.h"
#include "codegen/vector_io.h"
#include "ir/type_rules.h"
#include "passes/fusion/domain.h"

namespace fusec::codegen {

namespace {

constexpr int64_t kMaxColumnsPerPass = 2048;  // 64 accumulators per lane
constexpr int kRangeWarps = 16;               // warps of a block that owns a range of rows
constexpr int kRangeStage = 4096;             // ids a block scans between list checks (8 a thread)
constexpr int kListed = 2048;                 // positions listed before a round adds them
constexpr int64_t kRangeColumns = 128;        // columns of a row one warp adds at a time (4 a lane)
constexpr int kHitBatch = 4;                  // a row's listed positions whose loads a warp issues together
constexpr int64_t kSegment = 256;             // a row's positions one warp adds, when the row has more

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

int64_t scatterRowSegment(int64_t columns) {
  const int64_t passes = (columns + kRangeColumns - 1) / kRangeColumns, perPass = (columns + passes - 1) / passes;
  // The partial sums take the list's room, which they fit: at most 2 * S / segment segments
  // of perPass floats.
  return std::max<int64_t>(kSegment, 2 * perPass);
}

std::vector<Launch> emitScatter(const FamilyInput& k, CodeWriter& w) {
  const Op* scatter = nullptr;
  for (auto& op : k.body.ops)
    if (op->kind == OpKind::ScatterAdd) scatter = op.get();
  const Value* result = scatter->result();
  const Value *base = scatter->operands[0], *index = scatter->operands[1], *src = scatter->operands[2];
  // The values computed from the table: the epilogue, pointwise at the table's own positions.
  std::set<const Value*> fromTable = {result};
  for (auto& op : k.body.ops) {
    bool reads = false;
    for (const Value* o : op->operands) reads |= fromTable.count(o) != 0;
    if (!reads || op.get() == scatter) continue;
    if (op->info().category != OpCategory::Pointwise || op->result()->type.shape != result->type.shape)
      throw Error("codegen: scatter kernel '" + k.body.name + "' reads its table through " +
                  std::string(op->info().name) + ", not element for element");
    for (auto& r : op->results) fromTable.insert(r.get());
  }
  // Outputs: the table, values computed from it, and values of neither (each stored by an
  // element loop over its own shape: the source's pointwise producers).
  std::vector<int> scatterOuts, tableOuts;
  std::map<int64_t, std::vector<int>> otherOuts;  // by element count
  for (size_t i = 0; i < k.body.outputs.size(); ++i) {
    const Value* o = k.body.outputs[i];
    if (o == result) scatterOuts.push_back(int(i));
    else if (fromTable.count(o)) tableOuts.push_back(int(i));
    else otherOuts[o->type.numel()].push_back(int(i));
  }
  const bool epilogue = !tableOuts.empty();
  const Shape& shape = result->type.shape;
  const int ax = normalizeAxis(scatter->attrInt("axis"), result->type.rank(), "scatter_add");
  const Shape outer(shape.begin(), shape.begin() + ax), inner(shape.begin() + ax + 1, shape.end());
  const int64_t D = shape[size_t(ax)], S = src->type.shape[size_t(ax)], B = product(shape, size_t(ax) + 1, shape.size());
  const int64_t rows = product(shape, 0, size_t(ax)) * D;
  const bool ballot = indexIsPerRow(index, ax);
  // With one scatter row group (no dims before the axis: an embedding) a block owns a range
  // of rows. It scans the ids once, listing in shared memory the positions whose id falls in
  // its rows (in position order: each warp ballots over its own slice of a stage, the slices in
  // order). The ids are read once per block, about 2 x SMs times in all: the scheme before, a
  // block per 16 rows that staged every id through shared memory, read them 625 times at
  // small's vocabulary and ran at 17% of the copy bandwidth. A warp takes up to kHitBatch of a
  // row's positions at a time, their loads in flight together, their additions in order; an
  // epilogue's param and moments load before the sum (small's embedding update at batch 64,
  // H200: 78.4 us with both, 86.4 adding one position at a time, 130.8 against 91.6 without
  // the early loads). Two ways to go on:
  // - `csr`, every position fits the list (at most kMaxScatterEpilogueSources: always with an
  //   epilogue). Blocks own (rows, 128 columns) tiles, about two an SM. Warp 0 sorts the list
  //   by row, stably, and a row of more than scatterRowSegment positions is summed in
  //   segments by several warps, whose partial sums it then adds in order. Text-like ids put a
  //   tenth of the positions on one token: when a block owned whole rows and one warp a row's
  //   columns, that row was one SM's and one warp's work (1.69 ms at small batch 64, Zipf
  //   1/rank ids; 0.247 ms now, 0.456 and 0.135 ms at medium batch 16). Uniform ids pay for
  //   the sort: 85.8 against 79.0 us at small batch 64.
  // - rounds, otherwise: items of (row, 128 columns) per block of rows; when the list fills
  //   (more than kListed hits) the block adds what it has, then goes on scanning. The first
  //   round writes every row, later rounds add to the rows they hit, so every row's positions
  //   are still added in order (a 16-bit result is rounded once per round).
  const bool ranged = ballot && product(shape, 0, size_t(ax)) == 1 && S < (int64_t(1) << 31);
  // Every position fits the list at once: the block sorts its list by row (below, `csr`).
  const bool csr = ranged && S <= fusion::kMaxScatterEpilogueSources;
  if (epilogue && ranged && !csr)
    throw Error("codegen: scatter kernel '" + k.body.name + "' updates its table in place of storing it, but its " +
                std::to_string(S) + " source positions exceed the " +
                std::to_string(fusion::kMaxScatterEpilogueSources) + " its shared-memory list holds");
  const int64_t columnsPerPass = ranged ? kRangeColumns : kMaxColumnsPerPass;
  const int64_t passes = (B + columnsPerPass - 1) / columnsPerPass, perPass = (B + passes - 1) / passes;
  const int64_t Q = (perPass + 31) / 32;
  const std::string rt = registerType(result->type.dtype), sB = std::to_string(B), sP = std::to_string(perPass);
  const int block = ranged ? 32 * kRangeWarps : kBlock;
  int64_t grid = std::clamp<int64_t>((rows * 32 + block - 1) / block, 1, 65535);
  int64_t range = 0, listSize = 0, rowBlocks = 0;
  // A list entry: position << 16 | local row in one word when positions fit 16 bits, else a
  // position word and a row half-word.
  const bool packed = S <= 65536;
  const int64_t entryBytes = packed ? 4 : 6;
  const int64_t segment = scatterRowSegment(B);
  auto csrBytes = [&](int64_t r) {  // the list, the row tables, the positions sorted by row
    return S * 4 + 4 * (4 * r + 3) + (S * 2 + 15) / 16 * 16;
  };
  if (csr) {
    // Blocks own (rows, columns) tiles: a block per `range` rows and perPass columns, about
    // two a SM, so one row's work spreads over `passes` SMs (a common token's rows were one
    // SM's work: 1.7 ms at small batch 64 with text-like ids).
    rowBlocks = std::clamp<int64_t>(2 * int64_t(k.target.sms) / passes, 1, rows);
    rowBlocks = std::max<int64_t>(rowBlocks, (rows + 65535 - 1) / 65535);  // a local row fits 16 bits
    while ((csrBytes((rows + rowBlocks - 1) / rowBlocks) + k.target.smemReservedPerBlock) * 2 > k.target.smemPerSm &&
           rowBlocks < rows)
      ++rowBlocks;
    range = (rows + rowBlocks - 1) / rowBlocks;
    rowBlocks = (rows + range - 1) / range;
    grid = rowBlocks * passes;
    listSize = S;
  } else if (ranged) {
    listSize = std::max<int64_t>(std::min<int64_t>(S, kListed + kRangeStage), 1);  // at most S are ever listed
    // Two blocks per SM (three, where three lists fit, ran an embedding update of this
    // layout slower: 91.6 against 78.4 us at small batch 64, H200).
    grid = std::min<int64_t>((rows + kRangeWarps - 1) / kRangeWarps, 2 * int64_t(k.target.sms));
    grid = std::max<int64_t>(grid, (rows + 65535 - 1) / 65535);  // a local row fits 16 bits
    range = (rows + grid - 1) / grid;
    grid = (rows + range - 1) / range;
  }
  const uint32_t smem = csr ? uint32_t(csrBytes(range)) : ranged ? uint32_t((listSize * entryBytes + 15) / 16 * 16) : 0;
  // Two blocks an SM (the grid assumes them): at most 64 registers a thread.
  k.signature(w, k.name, block, csr ? 2 : 0);
  BodyEmitter e(k.body, w);
  w.line("// a warp per output row of " + std::to_string(B) + " columns, " + std::to_string(D) + " rows along the axis, " +
         std::to_string(S) + " source positions scanned in order" +
         (ranged ? " (a block per " + std::to_string(range) + " rows, their positions listed in shared memory)" : ""));
  w.line("const int lane = threadIdx.x % 32;");
  // Column q of this lane, and whether it exists in this pass.
  const std::string b0 = passes > 1 ? "b0 + " : "";
  auto column = [&](const std::string& q) {
    w.line("const fusec_idx b = " + b0 + "lane + 32 * " + q + ";");
    return "b < " + sB + (passes > 1 && Q * 32 > perPass ? " && lane + 32 * " + q + " < " + sP : "");
  };
  auto outIndex = [&](const Index& a, const std::string& prefix) {
    return linearize(join(a, "v", delinearize(w, "b", inner, prefix)), shape);
  };
  // acc = the base, or `other` where `unless` holds (the output this thread wrote before, in a
  // later round; zero, for a segment's partial sum).
  auto startRow = [&](const Index& a, const std::string& unless, const std::function<std::string()>& other) {
    w.line(rt + " acc[" + std::to_string(Q) + "];");
    w.line("// " + e.describe(*scatter) + ": base");
    w.line("#pragma unroll");
    e.openScope("for (int q = 0; q < " + std::to_string(Q) + "; ++q)");
    e.openScope("if (" + column("q") + ")");
    if (!unless.empty()) {
      w.line("if (" + unless + ") acc[q] = " + other() + ";");
      e.openScope("else");
    }
    w.line("acc[q] = " + e.eval(base, join(a, "v", delinearize(w, "b", inner, "ob"))) + ";");
    if (!unless.empty()) e.closeScope();
    e.closeScope();
    e.closeScope();
  };
  auto addRow = [&](const Index& a, const std::string& s) {
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
  // The epilogue's inputs of the table's shape read at the row's own columns (an update's
  // param and moments): loaded before the row's positions are added, so their loads and the
  // source rows' are in flight together (one memory latency an item instead of two).
  std::vector<const Value*> prefetched;
  if (epilogue) {
    std::vector<const Value*> roots;
    for (int out : tableOuts) roots.push_back(k.body.outputs[size_t(out)]);
    for (const Value* in : inputsReadInPlace(k.body, roots))
      if (in->type.shape == shape) prefetched.push_back(in);
  }
  auto prefetchName = [&](size_t i) { return "pre" + std::to_string(i); };
  // `when`: a condition for the loads (an item that applies the epilogue), or empty.
  auto prefetch = [&](const Index& a, const std::string& when) {
    if (prefetched.empty()) return;
    for (size_t i = 0; i < prefetched.size(); ++i) w.line("float " + prefetchName(i) + "[" + std::to_string(Q) + "];");
    w.line("// the epilogue's own inputs at this row's columns, ahead of the sum");
    w.line("#pragma unroll");
    e.openScope("for (int q = 0; q < " + std::to_string(Q) + "; ++q)");
    e.openScope("if (" + (when.empty() ? "" : when + " && ") + column("q") + ")");
    const std::string at = linearize(join(a, "v", delinearize(w, "b", inner, "eb")), shape);
    for (size_t i = 0; i < prefetched.size(); ++i)
      w.line(prefetchName(i) + "[q] = " + loadExpr(prefetched[i]->type.dtype, inputPointer(k.body, prefetched[i]), at) + ";");
    e.closeScope();
    e.closeScope();
  };
  // The row's columns are complete in acc: store the table, or evaluate the epilogue's
  // outputs at them, every column's loads before any store (an in-place update's outputs
  // alias its inputs, so the stores would otherwise hold back the next column's loads).
  auto storeRow = [&](const Index& a) {
    std::vector<std::string> regs;
    if (epilogue) {
      e.bindReduction(result, "acc[q]");
      for (int out : tableOuts) {
        regs.push_back("res" + std::to_string(out));
        w.line(registerType(e.storedForm(k.body.outputs[size_t(out)])->type.dtype) + " " + regs.back() + "[" +
               std::to_string(Q) + "];");
      }
      w.line("// the epilogue at this row's columns");
      w.line("#pragma unroll");
      e.openScope("for (int q = 0; q < " + std::to_string(Q) + "; ++q)");
      e.openScope("if (" + column("q") + ")");
      const Index idx = join(a, "v", delinearize(w, "b", inner, "eb"));
      for (size_t i = 0; i < prefetched.size(); ++i)
        e.bindElement(prefetched[i], linearize(idx, shape), prefetchName(i) + "[q]");
      for (size_t t = 0; t < tableOuts.size(); ++t)
        w.line(regs[t] + "[q] = " + e.eval(e.storedForm(k.body.outputs[size_t(tableOuts[t])]), idx) + ";");
      e.closeScope();
      e.closeScope();
    }
    w.line("#pragma unroll");
    e.openScope("for (int q = 0; q < " + std::to_string(Q) + "; ++q)");
    e.openScope("if (" + column("q") + ")");
    const std::string o = outIndex(a, "wb");
    for (int out : scatterOuts)
      w.line("out" + std::to_string(out) + "[" + o + "] = " + storeValue(result->type.dtype, "acc[q]") + ";");
    for (size_t t = 0; t < tableOuts.size(); ++t)
      w.line("out" + std::to_string(tableOuts[t]) + "[" + o + "] = " +
             storeValue(k.body.outputs[size_t(tableOuts[t])]->type.dtype, regs[t] + "[q]") + ";");
    e.closeScope();
    e.closeScope();
  };
  if (ranged) {
    const std::string sS = std::to_string(S), R = std::to_string(range), NW = std::to_string(kRangeWarps),
                      ST = std::to_string(kRangeStage), SL = std::to_string(kRangeStage / kRangeWarps),
                      J = std::to_string(kRangeStage / kRangeWarps / 32), H = std::to_string(listSize),
                      sPasses = std::to_string(passes), U = std::to_string(kHitBatch), sQ = std::to_string(Q),
                      SEG = std::to_string(segment);
    w.line("const int warp = threadIdx.x / 32;");
    w.line("extern __shared__ __align__(16) unsigned char fusec_smem[];");
    if (packed) {
      w.line("unsigned* hits = (unsigned*)fusec_smem;  // the listed positions in order (" + H + "), each position << 16 | row - row0");
    } else {
      w.line("int* hitPos = (int*)fusec_smem;  // the listed positions, in order (" + H + ")");
      w.line("unsigned short* hitRow = (unsigned short*)(hitPos + " + H + ");  // and their rows, from row0");
    }
    if (csr) {
      w.line("int* rowStart = (int*)(hits + " + H + ");  // each row's first position in `order` (" + R + " + 1)");
      w.line("int* itemStart = rowStart + " + R + " + 1;  // each row's first item: the row, or its first segment");
      w.line("int* slotStart = itemStart + " + R + " + 1;  // each row's first partial sum (rows in segments)");
      w.line("int* cursor = slotStart + " + R + " + 1;  // the rows' counts while listing, then their next places in `order`");
      w.line("unsigned short* order = (unsigned short*)(cursor + " + R + ");  // the listed positions by row, in position order within a row");
      w.line("float* partial = (float*)fusec_smem;  // once `order` is complete: the segments' partial sums");
    }
    w.line("__shared__ int warpHits[" + NW + "];");
    if (csr) {
      w.line("const fusec_idx row0 = (fusec_idx)" + (passes > 1 ? "(blockIdx.x / " + sPasses + ")" : "blockIdx.x") + " * " + R + ";");
      if (passes > 1) w.line("const fusec_idx b0 = (fusec_idx)(blockIdx.x % " + sPasses + ") * " + sP + ";");
    } else {
      w.line("const fusec_idx row0 = (fusec_idx)blockIdx.x * " + R + ";");
    }
    w.line("const int nrows = (int)min((fusec_idx)" + R + ", (fusec_idx)" + std::to_string(rows) + " - row0);");
    w.line("int listed = 0;  // the same in every thread");
    auto rowAt = [&](const std::string& h) { return packed ? "(int)(hits[" + h + "] & 0xffffu)" : "(int)hitRow[" + h + "]"; };
    auto posAt = [&](const std::string& h) {
      return packed ? "(fusec_idx)(hits[" + h + "] >> 16)" : "(fusec_idx)hitPos[" + h + "]";
    };
    // Up to kHitBatch positions s[0..n) of the row (found by the lines `fill` writes): their
    // loads together, their additions in order.
    auto addBatch = [&](const std::function<void()>& fill) {
      w.line("// up to " + U + " of the row's positions, in position order: their loads in flight together, added in order");
      w.line("fusec_idx s[" + U + "];");
      w.line("int n = 0;");
      fill();
      w.line(rt + " x[" + U + "][" + sQ + "];");
      w.line("#pragma unroll");
      e.openScope("for (int u = 0; u < " + U + "; ++u)");
      w.line("#pragma unroll");
      e.openScope("for (int q = 0; q < " + sQ + "; ++q)");
      const std::string in = column("q");
      const Index bi = delinearize(w, "b", inner, "sb");
      e.openScope("if (u < n && " + in + ")");
      w.line("x[u][q] = " + e.eval(src, join({}, "s[u]", bi)) + ";");
      e.closeScope();
      e.closeScope();
      e.closeScope();
      w.line("#pragma unroll");
      e.openScope("for (int u = 0; u < " + U + "; ++u)");
      w.line("#pragma unroll");
      w.line("for (int q = 0; q < " + sQ + "; ++q) if (u < n) acc[q] += x[u][q];");
      e.closeScope();
    };
    // One stage of the listing: the positions t0 .. t0 + ST whose id falls in the block's
    // rows, appended in position order (warp w ballots over its slice, the slices in order).
    auto listStage = [&] {
      w.line("// list this stage's positions of the block's rows: warp w ballots over its slice");
      w.line("int local[" + J + "];");
      w.line("unsigned m[" + J + "];");
      w.line("int count = 0;");
      w.line("#pragma unroll");
      e.openScope("for (int j = 0; j < " + J + "; ++j)");
      w.line("const fusec_idx s = t0 + warp * " + SL + " + j * 32 + lane;");
      w.line("local[j] = -1;");
      e.openScope("if (s < " + sS + ")");
      // 64-bit: an id past 2^31 must not wrap into the block's rows.
      w.line("const long long d = (long long)" + e.eval(index, join({}, "s", Index(inner.size(), "0"))) + " - row0;");
      w.line("if (d >= 0 && d < nrows) local[j] = (int)d;");
      e.closeScope();
      w.line("m[j] = __ballot_sync(0xffffffffu, local[j] >= 0);");
      w.line("count += __popc(m[j]);");
      e.closeScope();
      w.line("if (lane == 0) warpHits[warp] = count;");
      w.line("__syncthreads();");
      w.line("int at = listed;");
      w.line("#pragma unroll");
      w.line("for (int g = 0; g < " + NW + "; ++g) at += g < warp ? warpHits[g] : 0;");
      w.line("#pragma unroll");
      w.line("for (int g = 0; g < " + NW + "; ++g) listed += warpHits[g];");
      w.line("#pragma unroll");
      e.openScope("for (int j = 0; j < " + J + "; ++j)");
      e.openScope("if (local[j] >= 0)");
      w.line("const int h = at + __popc(m[j] & ((1u << lane) - 1u));");
      if (packed) {
        w.line("hits[h] = (unsigned)(t0 + warp * " + SL + " + j * 32 + lane) << 16 | (unsigned)local[j];");
      } else {
        w.line("hitPos[h] = t0 + warp * " + SL + " + j * 32 + lane;");
        w.line("hitRow[h] = (unsigned short)local[j];");
      }
      if (csr) w.line("atomicAdd(&cursor[local[j]], 1);  // a count: the same whatever the order");
      e.closeScope();
      w.line("at += __popc(m[j]);");
      e.closeScope();
      w.line("__syncthreads();  // the list is complete, and warpHits read");
    };
    if (csr) {
      w.line("for (int i = threadIdx.x; i < nrows; i += blockDim.x) cursor[i] = 0;");
      w.line("__syncthreads();");
      e.openScope("for (fusec_idx t0 = 0; t0 < " + sS + "; t0 += " + ST + ")");
      listStage();
      e.closeScope();
      w.line("// each row's first position, item and partial sum: sums over the rows before it (warp 0). A row");
      w.line("// of more than " + SEG + " positions is summed in segments of " + SEG + ", one item each");
      e.openScope("if (warp == 0)");
      w.line("const int per = (nrows + 31) / 32, i0 = min(nrows, lane * per), i1 = min(nrows, i0 + per);");
      w.line("int pn = 0, pi = 0, ps = 0;");
      e.openScope("for (int i = i0; i < i1; ++i)");
      w.line("const int c = cursor[i], segs = c > " + SEG + " ? (c + " + SEG + " - 1) / " + SEG + " : 1;");
      w.line("pn += c, pi += segs, ps += c > " + SEG + " ? segs : 0;");
      e.closeScope();
      w.line("const int n = pn, items = pi, slots = ps;");
      w.line("#pragma unroll");
      e.openScope("for (int d = 1; d < 32; d *= 2)");
      w.line("const int a = __shfl_up_sync(0xffffffffu, pn, d), b = __shfl_up_sync(0xffffffffu, pi, d), c = __shfl_up_sync(0xffffffffu, ps, d);");
      w.line("if (lane >= d) pn += a, pi += b, ps += c;");
      e.closeScope();
      w.line("pn -= n, pi -= items, ps -= slots;  // the lanes before this one's");
      e.openScope("for (int i = i0; i < i1; ++i)");
      w.line("const int c = cursor[i], segs = c > " + SEG + " ? (c + " + SEG + " - 1) / " + SEG + " : 1;");
      w.line("rowStart[i] = pn, itemStart[i] = pi, slotStart[i] = ps, cursor[i] = pn;");
      w.line("pn += c, pi += segs, ps += c > " + SEG + " ? segs : 0;");
      e.closeScope();
      w.line("if (lane == 31) rowStart[nrows] = pn, itemStart[nrows] = pi, slotStart[nrows] = ps;");
      e.closeScope();
      w.line("__syncthreads();");
      w.line("// the list sorted by row, stably (so each row's positions stay in position order): warp 0, 32 at a time");
      e.openScope("if (warp == 0)");
      e.openScope("for (int h0 = 0; h0 < listed; h0 += 32)");
      w.line("const bool valid = h0 + lane < listed;");
      w.line("const unsigned x = valid ? hits[h0 + lane] : 0u;");
      w.line("const int r = valid ? (int)(x & 0xffffu) : -1;");
      w.line("const unsigned peers = __match_any_sync(0xffffffffu, r);");
      w.line("const int leader = __ffs(peers) - 1;");
      w.line("int at = valid && lane == leader ? cursor[r] : 0;");
      w.line("at = __shfl_sync(0xffffffffu, at, leader) + __popc(peers & ((1u << lane) - 1u));");
      w.line("if (valid) order[at] = (unsigned short)(x >> 16);");
      w.line("if (valid && lane == leader) cursor[r] = at + __popc(peers);");
      w.line("__syncwarp();");
      e.closeScope();
      e.closeScope();
      w.line("__syncthreads();  // `order` is complete: the list's room takes the partial sums");
      w.line("// items: a row (its sum, then its results), or a segment of a long row (a partial sum)");
      e.openScope("for (int it = warp; it < itemStart[nrows]; it += " + NW + ")");
      w.line("int r = 0, hi = nrows;  // the row whose items hold it");
      w.line("while (hi - r > 1) { const int mid = (r + hi) / 2; if (itemStart[mid] <= it) r = mid; else hi = mid; }");
      w.line("const fusec_idx v = row0 + r;");
      w.line("const int first = rowStart[r], count = rowStart[r + 1] - first;");
      w.line("const bool part = count > " + SEG + ";");
      w.line("const int i0 = first + (part ? (it - itemStart[r]) * " + SEG + " : 0), i1 = part ? min(i0 + " + SEG +
             ", first + count) : first + count;");
      prefetch({}, "!part");
      startRow({}, "part", [] { return std::string("0.0f"); });
      e.openScope("for (int i = i0; i < i1; i += " + U + ")");
      addBatch([&] {
        w.line("#pragma unroll");
        w.line("for (int u = 0; u < " + U + "; ++u) s[u] = i + u < i1 ? (fusec_idx)order[i + u] : (fusec_idx)order[i];");
        w.line("n = min(" + U + ", i1 - i);");
      });
      e.closeScope();
      // `line` for each of this lane's columns q that exist.
      auto eachColumn = [&](const std::string& line) {
        w.line("#pragma unroll");
        e.openScope("for (int q = 0; q < " + sQ + "; ++q)");
        e.openScope("if (" + column("q") + ")");
        w.line(line);
        e.closeScope();
        e.closeScope();
      };
      e.openScope("if (part)");
      eachColumn("partial[(slotStart[r] + it - itemStart[r]) * " + sP + " + lane + 32 * q] = acc[q];");
      e.closeScope();
      e.openScope("else");
      storeRow({});
      e.closeScope();
      e.closeScope();
      w.line("__syncthreads();  // every segment's partial sum is in");
      w.line("// rows in segments: their partial sums added in segment order, then their results");
      e.openScope("for (int r = warp; r < nrows; r += " + NW + ")");
      w.line("const int s0 = slotStart[r], segs = slotStart[r + 1] - s0;");
      w.line("if (segs == 0) continue;");
      w.line("const fusec_idx v = row0 + r;");
      prefetch({}, "");
      startRow({}, "", nullptr);
      e.openScope("for (int k = 0; k < segs; ++k)");
      eachColumn("acc[q] += partial[(s0 + k) * " + sP + " + lane + 32 * q];");
      e.closeScope();
      storeRow({});
      e.closeScope();
    } else {
      w.line("bool again = false;  // a later round: add to the rows written before");
      e.openScope("for (fusec_idx t0 = 0;; t0 += " + ST + ")");
      w.line("const bool end = t0 >= " + sS + ";");
      e.openScope("if (end || listed > " + std::to_string(kListed) + ")");
      w.line("// a round: each warp adds the listed positions of its (row, columns) items, in list order");
      e.openScope("for (int it = warp; it < nrows" + (passes > 1 ? " * " + sPasses : "") + "; it += " + NW + ")");
      w.line("const int r = it" + (passes > 1 ? " / " + sPasses : "") + ";");
      if (passes > 1) w.line("const fusec_idx b0 = (fusec_idx)(it % " + sPasses + ") * " + sP + ";");
      w.line("const fusec_idx v = row0 + r;");
      w.line("bool hit = !again;");
      e.openScope("for (int h0 = 0; !hit && h0 < listed; h0 += 32)");
      w.line("hit = __any_sync(0xffffffffu, h0 + lane < listed && " + rowAt("h0 + lane") + " == r);");
      e.closeScope();
      w.line("if (!hit) continue;  // a later round that does not touch this row");
      startRow({}, "again", [&] { return loadExpr(result->type.dtype, "out" + std::to_string(scatterOuts.at(0)), outIndex({}, "rb")); });
      e.openScope("for (int h0 = 0; h0 < listed; h0 += 32)");
      w.line("const bool mine = h0 + lane < listed && " + rowAt("h0 + lane") + " == r;");
      w.line("unsigned m = __ballot_sync(0xffffffffu, mine);");
      e.openScope("while (m != 0)");
      addBatch([&] {
        w.line("#pragma unroll");
        e.openScope("for (int u = 0; u < " + U + "; ++u)");
        e.openScope("if (m != 0)");
        w.line("s[u] = " + posAt("h0 + __ffs(m) - 1") + ";");
        w.line("m &= m - 1;");
        w.line("n = u + 1;");
        e.closeScope();
        w.line("else s[u] = s[0];");
        e.closeScope();
      });
      e.closeScope();
      e.closeScope();
      storeRow({});
      e.closeScope();
      w.line("again = true;");
      w.line("listed = 0;");
      w.line("__syncthreads();  // the list's readers are done before it is refilled");
      e.closeScope();
      w.line("if (end) break;");
      listStage();
      e.closeScope();
    }
  } else {
    e.openScope("for (fusec_idx row = ((fusec_idx)blockIdx.x * blockDim.x + threadIdx.x) / 32; row < " +
                std::to_string(rows) + "; row += (fusec_idx)gridDim.x * blockDim.x / 32)");
    w.line("const fusec_idx v = row % " + std::to_string(D) + ";");
    const Index a = delinearize(w, "(row / " + std::to_string(D) + ")", outer, "a");
    if (passes > 1) e.openScope("for (fusec_idx b0 = 0; b0 < " + sB + "; b0 += " + sP + ")");
    prefetch(a, "");
    startRow(a, "", nullptr);
    if (ballot) {
      e.openScope("for (fusec_idx s0 = 0; s0 < " + std::to_string(S) + "; s0 += 32)");
      w.line("bool hit = false;");
      e.openScope("if (s0 + lane < " + std::to_string(S) + ")");
      w.line("const fusec_idx s = s0 + lane;");
      w.line("hit = (fusec_idx)" + e.eval(index, join(a, "s", Index(inner.size(), "0"))) + " == v;");
      e.closeScope();
      w.line("// the matching positions in increasing order: a fixed order of the additions");
      e.openScope("for (unsigned m = __ballot_sync(0xffffffffu, hit); m != 0; m &= m - 1)");
      w.line("const fusec_idx s = s0 + __ffs(m) - 1;");
      addRow(a, "s");
      e.closeScope();
      e.closeScope();
    } else {
      e.openScope("for (fusec_idx s = 0; s < " + std::to_string(S) + "; ++s)");
      addRow(a, "s");
      e.closeScope();
    }
    storeRow(a);
    if (passes > 1) e.closeScope();
    e.closeScope();
  }
  for (const auto& [numel, outs] : otherOuts) {
    w.line("// outputs not computed from the table (the source's producers), element by element");
    e.openScope("for (fusec_idx i = (fusec_idx)blockIdx.x * blockDim.x + threadIdx.x; i < " + std::to_string(numel) +
                "; i += (fusec_idx)gridDim.x * blockDim.x)");
    for (int o : outs) {
      const Value* v = k.body.outputs[size_t(o)];
      e.store(v, "out" + std::to_string(o), delinearize(w, "i", v->type.shape, "p" + std::to_string(o)));
    }
    e.closeScope();
  }
  w.close();
  return {Launch{k.name, {uint32_t(grid), 1, 1}, {uint32_t(block), 1, 1}, smem}};
}

}  // namespace fusec::codegen
