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
  out.push_back(IndexExpr::var(x));
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

namespace {

// One scatter kernel as it is written: what the body scatters and which outputs come from the
// table (classify), the launch shape and the shared-memory list (plan), then the text: a
// block's range of rows listed and summed (`csr` or rounds), or a warp per row (ballot or
// per-column), then the outputs of neither. The members are what those steps share.
class ScatterEmitter {
 public:
  ScatterEmitter(const FamilyInput& k, KernelBuilder& w) : k_(k), w_(w), e_(k.body, w) {}

  std::vector<Launch> emit() {
    classify();
    plan();
    // Two blocks an SM (the grid assumes them): at most 64 registers a thread.
    k_.signature(w_, k_.name, block_, csr_ ? 2 : 0);
    w_.comment("a warp per output row of " + std::to_string(B_) + " columns, " + std::to_string(D_) +
            " rows along the axis, " + std::to_string(S_) + " source positions scanned in order" +
            (ranged_ ? " (a block per " + std::to_string(range_) + " rows, their positions listed in shared memory)" : ""));
    w_.let("int", "lane", "threadIdx.x % 32");
    if (ranged_) {
      writeRangeList();
      if (csr_) {
        writeCsrListing();
        writeCsrSort();
        writeCsrItems();
        writeCsrSegmentedRows();
      } else {
        writeRounds();
      }
    } else {
      writeRowLoop();
    }
    writeOtherOutputs();
    w_.close();
    return {Launch{k_.name, {uint32_t(grid_), 1, 1}, {uint32_t(block_), 1, 1}, smem_}};
  }

 private:
  // The scatter, the values computed from its table (the epilogue) and the outputs of each.
  void classify() {
    for (auto& op : k_.body.ops)
      if (op->kind == OpKind::ScatterAdd) scatter_ = op.get();
    result_ = scatter_->result();
    base_ = scatter_->operands[0], index_ = scatter_->operands[1], src_ = scatter_->operands[2];
    // The values computed from the table: the epilogue, pointwise at the table's own positions.
    std::set<const Value*> fromTable = {result_};
    for (auto& op : k_.body.ops) {
      bool reads = false;
      for (const Value* o : op->operands) reads |= fromTable.count(o) != 0;
      if (!reads || op.get() == scatter_) continue;
      if (op->info().category != OpCategory::Pointwise || op->result()->type.shape != result_->type.shape)
        throw Error("codegen: scatter kernel '" + k_.body.name + "' reads its table through " +
                    std::string(op->info().name) + ", not element for element");
      for (auto& r : op->results) fromTable.insert(r.get());
    }
    // Outputs: the table, values computed from it, and values of neither (each stored by an
    // element loop over its own shape: the source's pointwise producers).
    for (size_t i = 0; i < k_.body.outputs.size(); ++i) {
      const Value* o = k_.body.outputs[i];
      if (o == result_) scatterOuts_.push_back(int(i));
      else if (fromTable.count(o)) tableOuts_.push_back(int(i));
      else otherOuts_[o->type.numel()].push_back(int(i));
    }
    epilogue_ = !tableOuts_.empty();
    // The epilogue's inputs of the table's shape read at the row's own columns (an update's
    // param and moments): loaded before the row's positions are added, so their loads and the
    // source rows' are in flight together (one memory latency an item instead of two).
    if (epilogue_) {
      std::vector<const Value*> roots;
      for (int out : tableOuts_) roots.push_back(k_.body.outputs[size_t(out)]);
      for (const Value* in : inputsReadInPlace(k_.body, roots))
        if (in->type.shape == result_->type.shape) prefetched_.push_back(in);
    }
  }

  // The list entries' bytes for a block of `r` rows in `csr`: the list, the row tables, the
  // positions sorted by row.
  int64_t csrBytes(int64_t r) const { return S_ * 4 + 4 * (4 * r + 3) + (S_ * 2 + 15) / 16 * 16; }

  void plan() {
    const Shape& shape = result_->type.shape;
    const int ax = normalizeAxis(scatter_->attrInt("axis"), result_->type.rank(), "scatter_add");
    outer_ = Shape(shape.begin(), shape.begin() + ax);
    inner_ = Shape(shape.begin() + ax + 1, shape.end());
    D_ = shape[size_t(ax)], S_ = src_->type.shape[size_t(ax)], B_ = product(shape, size_t(ax) + 1, shape.size());
    rows_ = product(shape, 0, size_t(ax)) * D_;
    ballot_ = indexIsPerRow(index_, ax);
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
    ranged_ = ballot_ && product(shape, 0, size_t(ax)) == 1 && S_ < (int64_t(1) << 31);
    // Every position fits the list at once: the block sorts its list by row (below, `csr`).
    csr_ = ranged_ && S_ <= fusion::kMaxScatterEpilogueSources;
    if (epilogue_ && ranged_ && !csr_)
      throw Error("codegen: scatter kernel '" + k_.body.name + "' updates its table in place of storing it, but its " +
                  std::to_string(S_) + " source positions exceed the " +
                  std::to_string(fusion::kMaxScatterEpilogueSources) + " its shared-memory list holds");
    const int64_t columnsPerPass = ranged_ ? kRangeColumns : kMaxColumnsPerPass;
    passes_ = (B_ + columnsPerPass - 1) / columnsPerPass, perPass_ = (B_ + passes_ - 1) / passes_;
    Q_ = (perPass_ + 31) / 32;
    rt_ = registerType(result_->type.dtype), sB_ = std::to_string(B_), sP_ = std::to_string(perPass_);
    sQ_ = std::to_string(Q_);
    block_ = ranged_ ? 32 * kRangeWarps : kBlock;
    grid_ = std::clamp<int64_t>((rows_ * 32 + block_ - 1) / block_, 1, 65535);
    // A list entry: position << 16 | local row in one word when positions fit 16 bits, else a
    // position word and a row half-word.
    packed_ = S_ <= 65536;
    const int64_t entryBytes = packed_ ? 4 : 6;
    if (csr_) {
      // Blocks own (rows, columns) tiles: a block per `range` rows and perPass columns, about
      // two a SM, so one row's work spreads over `passes` SMs (a common token's rows were one
      // SM's work: 1.7 ms at small batch 64 with text-like ids).
      int64_t rowBlocks = std::clamp<int64_t>(2 * int64_t(k_.target.sms) / passes_, 1, rows_);
      rowBlocks = std::max<int64_t>(rowBlocks, (rows_ + 65535 - 1) / 65535);  // a local row fits 16 bits
      while ((csrBytes((rows_ + rowBlocks - 1) / rowBlocks) + k_.target.smemReservedPerBlock) * 2 > k_.target.smemPerSm &&
             rowBlocks < rows_)
        ++rowBlocks;
      range_ = (rows_ + rowBlocks - 1) / rowBlocks;
      rowBlocks = (rows_ + range_ - 1) / range_;
      grid_ = rowBlocks * passes_;
      listSize_ = S_;
    } else if (ranged_) {
      listSize_ = std::max<int64_t>(std::min<int64_t>(S_, kListed + kRangeStage), 1);  // at most S are ever listed
      // Two blocks per SM (three, where three lists fit, ran an embedding update of this
      // layout slower: 91.6 against 78.4 us at small batch 64, H200).
      grid_ = std::min<int64_t>((rows_ + kRangeWarps - 1) / kRangeWarps, 2 * int64_t(k_.target.sms));
      grid_ = std::max<int64_t>(grid_, (rows_ + 65535 - 1) / 65535);  // a local row fits 16 bits
      range_ = (rows_ + grid_ - 1) / grid_;
      grid_ = (rows_ + range_ - 1) / range_;
    }
    smem_ = csr_ ? uint32_t(csrBytes(range_)) : ranged_ ? uint32_t((listSize_ * entryBytes + 15) / 16 * 16) : 0;
  }

  // Column q of this lane, and whether it exists in this pass.
  std::string column(const std::string& q) {
    w_.let("fusec_idx", "b", std::string(passes_ > 1 ? "b0 + " : "") + "lane + 32 * " + q);
    return "b < " + sB_ + (passes_ > 1 && Q_ * 32 > perPass_ ? " && lane + 32 * " + q + " < " + sP_ : "");
  }
  std::string outIndex(const Index& a, const std::string& prefix) {
    return linearize(join(a, "v", delinearize(w_, IndexExpr::var("b"), inner_, prefix)), result_->type.shape).str();
  }
  // `line` for each of this lane's columns q that exist.
  void eachColumn(const std::string& line) {
    e_.openScope(kir::countedLoop("q", sQ_, -1));
    e_.openScope(kir::ifThen(column("q")));
    w_.line(line);
    e_.closeScope();
    e_.closeScope();
  }

  // acc = the base, or `other` where `unless` holds (the output this thread wrote before, in a
  // later round; zero, for a segment's partial sum).
  void startRow(const Index& a, const std::string& unless, const std::function<std::string()>& other) {
    w_.array(rt_, "acc", sQ_);
    w_.comment(e_.describe(*scatter_) + ": base");
    e_.openScope(kir::countedLoop("q", sQ_, -1));
    e_.openScope(kir::ifThen(column("q")));
    if (!unless.empty()) {
      const std::string kept = other();
      w_.openOneLine(kir::ifThen(unless));
      w_.assign("acc[q]", kept);
      w_.close();
      e_.openScope(kir::elseIf(""));
    }
    w_.assign("acc[q]", e_.eval(base_, join(a, "v", delinearize(w_, IndexExpr::var("b"), inner_, "ob"))));
    if (!unless.empty()) e_.closeScope();
    e_.closeScope();
    e_.closeScope();
  }
  void addRow(const Index& a, const std::string& s) {
    e_.openScope(kir::countedLoop("q", sQ_, -1));
    const std::string in = column("q");
    const Index bi = delinearize(w_, IndexExpr::var("b"), inner_, "sb");
    e_.openScope(kir::ifThen(in));
    if (!ballot_) e_.openScope(kir::ifThen("(fusec_idx)" + e_.eval(index_, join(a, s, bi)) + " == v"));
    w_.accumulate("acc[q]", "+", e_.eval(src_, join(a, s, bi)));
    if (!ballot_) e_.closeScope();
    e_.closeScope();
    e_.closeScope();
  }
  static std::string prefetchName(size_t i) { return "pre" + std::to_string(i); }
  // `when`: a condition for the loads (an item that applies the epilogue), or empty.
  void prefetch(const Index& a, const std::string& when) {
    if (prefetched_.empty()) return;
    for (size_t i = 0; i < prefetched_.size(); ++i) w_.array("float", prefetchName(i), sQ_);
    w_.comment("the epilogue's own inputs at this row's columns, ahead of the sum");
    e_.openScope(kir::countedLoop("q", sQ_, -1));
    e_.openScope(kir::ifThen((when.empty() ? "" : when + " && ") + column("q")));
    const std::string at = linearize(join(a, "v", delinearize(w_, IndexExpr::var("b"), inner_, "eb")), result_->type.shape).str();
    for (size_t i = 0; i < prefetched_.size(); ++i)
      w_.assign(prefetchName(i) + "[q]", loadExpr(prefetched_[i]->type.dtype, inputPointer(k_.body, prefetched_[i]), at));
    e_.closeScope();
    e_.closeScope();
  }
  // The row's columns are complete in acc: store the table, or evaluate the epilogue's
  // outputs at them, every column's loads before any store (an in-place update's outputs
  // alias its inputs, so the stores would otherwise hold back the next column's loads).
  void storeRow(const Index& a) {
    std::vector<std::string> regs;
    if (epilogue_) {
      e_.bindReduction(result_, "acc[q]");
      for (int out : tableOuts_) {
        regs.push_back("res" + std::to_string(out));
        w_.array(registerType(e_.storedForm(k_.body.outputs[size_t(out)])->type.dtype), regs.back(), sQ_);
      }
      w_.comment("the epilogue at this row's columns");
      e_.openScope(kir::countedLoop("q", sQ_, -1));
      e_.openScope(kir::ifThen(column("q")));
      const Index idx = join(a, "v", delinearize(w_, IndexExpr::var("b"), inner_, "eb"));
      for (size_t i = 0; i < prefetched_.size(); ++i)
        e_.bindElement(prefetched_[i], linearize(idx, result_->type.shape), prefetchName(i) + "[q]");
      for (size_t t = 0; t < tableOuts_.size(); ++t)
        w_.assign(regs[t] + "[q]", e_.eval(e_.storedForm(k_.body.outputs[size_t(tableOuts_[t])]), idx));
      e_.closeScope();
      e_.closeScope();
    }
    e_.openScope(kir::countedLoop("q", sQ_, -1));
    e_.openScope(kir::ifThen(column("q")));
    const std::string o = outIndex(a, "wb");
    for (int out : scatterOuts_)
      w_.store("out" + std::to_string(out), o, storeValue(result_->type.dtype, "acc[q]"));
    for (size_t t = 0; t < tableOuts_.size(); ++t)
      w_.store("out" + std::to_string(tableOuts_[t]), o,
               storeValue(k_.body.outputs[size_t(tableOuts_[t])]->type.dtype, regs[t] + "[q]"));
    e_.closeScope();
    e_.closeScope();
  }

  // A block's range of rows: the shared-memory list's layout and the block's first row.
  void writeRangeList() {
    const std::string R = std::to_string(range_), H = std::to_string(listSize_), sPasses = std::to_string(passes_);
    w_.let("int", "warp", "threadIdx.x / 32");
    w_.memory(kir::Space::DynamicShared, "unsigned char", "fusec_smem", "");
    if (packed_) {
      w_.line("unsigned* hits = (unsigned*)fusec_smem;  // the listed positions in order (" + H +
              "), each position << 16 | row - row0");
    } else {
      w_.line("int* hitPos = (int*)fusec_smem;  // the listed positions, in order (" + H + ")");
      w_.line("unsigned short* hitRow = (unsigned short*)(hitPos + " + H + ");  // and their rows, from row0");
    }
    if (csr_) {
      w_.line("int* rowStart = (int*)(hits + " + H + ");  // each row's first position in `order` (" + R + " + 1)");
      w_.line("int* itemStart = rowStart + " + R + " + 1;  // each row's first item: the row, or its first segment");
      w_.line("int* slotStart = itemStart + " + R + " + 1;  // each row's first partial sum (rows in segments)");
      w_.line("int* cursor = slotStart + " + R + " + 1;  // the rows' counts while listing, then their next places in `order`");
      w_.line("unsigned short* order = (unsigned short*)(cursor + " + R +
              ");  // the listed positions by row, in position order within a row");
      w_.line("float* partial = (float*)fusec_smem;  // once `order` is complete: the segments' partial sums");
    }
    w_.memory(kir::Space::Shared, "int", "warpHits", std::to_string(kRangeWarps));
    if (csr_) {
      w_.line("const fusec_idx row0 = (fusec_idx)" + (passes_ > 1 ? "(blockIdx.x / " + sPasses + ")" : "blockIdx.x") +
              " * " + R + ";");
      if (passes_ > 1) w_.let("fusec_idx", "b0", "(fusec_idx)(blockIdx.x % " + sPasses + ") * " + sP_);
    } else {
      w_.let("fusec_idx", "row0", "(fusec_idx)blockIdx.x * " + R);
    }
    w_.let("int", "nrows", "(int)min((fusec_idx)" + R + ", (fusec_idx)" + std::to_string(rows_) + " - row0)");
    w_.var("int", "listed", "0", "the same in every thread");
  }
  std::string rowAt(const std::string& h) const {
    return packed_ ? "(int)(hits[" + h + "] & 0xffffu)" : "(int)hitRow[" + h + "]";
  }
  std::string posAt(const std::string& h) const {
    return packed_ ? "(fusec_idx)(hits[" + h + "] >> 16)" : "(fusec_idx)hitPos[" + h + "]";
  }

  // Up to kHitBatch positions s[0..n) of the row (found by the lines `fill` writes): their
  // loads together, their additions in order.
  void addBatch(const std::function<void()>& fill) {
    const std::string U = std::to_string(kHitBatch);
    w_.comment("up to " + U + " of the row's positions, in position order: their loads in flight together, added in order");
    w_.array("fusec_idx", "s", U);
    w_.var("int", "n", "0");
    fill();
    w_.array(rt_, "x", U + "][" + sQ_);
    e_.openScope(kir::countedLoop("u", U, -1));
    e_.openScope(kir::countedLoop("q", sQ_, -1));
    const std::string in = column("q");
    const Index bi = delinearize(w_, IndexExpr::var("b"), inner_, "sb");
    e_.openScope(kir::ifThen("u < n && " + in));
    w_.assign("x[u][q]", e_.eval(src_, join({}, "s[u]", bi)));
    e_.closeScope();
    e_.closeScope();
    e_.closeScope();
    e_.openScope(kir::countedLoop("u", U, -1));
    w_.openOneLine(kir::countedLoop("q", sQ_, -1));
    w_.openOneLine(kir::ifThen("u < n"));
    w_.accumulate("acc[q]", "+", "x[u][q]");
    w_.close();
    w_.close();
    e_.closeScope();
  }

  // One stage of the listing: the positions t0 .. t0 + kRangeStage whose id falls in the
  // block's rows, appended in position order (warp w ballots over its slice, the slices in order).
  void listStage() {
    const std::string NW = std::to_string(kRangeWarps), SL = std::to_string(kRangeStage / kRangeWarps),
                      J = std::to_string(kRangeStage / kRangeWarps / 32);
    w_.comment("list this stage's positions of the block's rows: warp w ballots over its slice");
    w_.array("int", "local", J);
    w_.array("unsigned", "m", J);
    w_.var("int", "count", "0");
    e_.openScope(kir::countedLoop("j", J, -1));
    w_.let("fusec_idx", "s", "t0 + warp * " + SL + " + j * 32 + lane");
    w_.assign("local[j]", "-1");
    e_.openScope(kir::ifThen("s < " + std::to_string(S_)));
    // 64-bit: an id past 2^31 must not wrap into the block's rows.
    w_.let("long long", "d", "(long long)" + e_.eval(index_, join({}, "s", Index(inner_.size(), IndexExpr(0)))) + " - row0");
    w_.openOneLine(kir::ifThen("d >= 0 && d < nrows"));
    w_.assign("local[j]", "(int)d");
    w_.close();
    e_.closeScope();
    w_.assign("m[j]", "__ballot_sync(0xffffffffu, local[j] >= 0)");
    w_.accumulate("count", "+", "__popc(m[j])");
    e_.closeScope();
    w_.openOneLine(kir::ifThen("lane == 0"));
    w_.store("warpHits", "warp", "count");
    w_.close();
    w_.barrier();
    w_.var("int", "at", "listed");
    w_.openOneLine(kir::countedLoop("g", NW, -1));
    w_.accumulate("at", "+", "g < warp ? warpHits[g] : 0");
    w_.close();
    w_.openOneLine(kir::countedLoop("g", NW, -1));
    w_.accumulate("listed", "+", "warpHits[g]");
    w_.close();
    e_.openScope(kir::countedLoop("j", J, -1));
    e_.openScope(kir::ifThen("local[j] >= 0"));
    w_.let("int", "h", "at + __popc(m[j] & ((1u << lane) - 1u))");
    if (packed_) {
      w_.store("hits", "h", "(unsigned)(t0 + warp * " + SL + " + j * 32 + lane) << 16 | (unsigned)local[j]");
    } else {
      w_.store("hitPos", "h", "t0 + warp * " + SL + " + j * 32 + lane");
      w_.store("hitRow", "h", "(unsigned short)local[j]");
    }
    if (csr_) w_.line("atomicAdd(&cursor[local[j]], 1);  // a count: the same whatever the order");
    e_.closeScope();
    w_.accumulate("at", "+", "__popc(m[j])");
    e_.closeScope();
    w_.barrier(kir::SyncScope::Block, "the list is complete, and warpHits read");
  }

  // `csr`: every position listed at once with each row's count, then each row's first
  // position, item and partial sum (prefix sums over the rows, warp 0).
  void writeCsrListing() {
    const std::string SEG = std::to_string(scatterRowSegment(B_));
    w_.line("for (int i = threadIdx.x; i < nrows; i += blockDim.x) cursor[i] = 0;");
    w_.barrier();
    e_.openScope("for (fusec_idx t0 = 0; t0 < " + std::to_string(S_) + "; t0 += " + std::to_string(kRangeStage) + ")");
    listStage();
    e_.closeScope();
    w_.comment("each row's first position, item and partial sum: sums over the rows before it (warp 0). A row");
    w_.comment("of more than " + SEG + " positions is summed in segments of " + SEG + ", one item each");
    e_.openScope(kir::ifThen("warp == 0"));
    w_.line("const int per = (nrows + 31) / 32, i0 = min(nrows, lane * per), i1 = min(nrows, i0 + per);");
    w_.line("int pn = 0, pi = 0, ps = 0;");
    e_.openScope("for (int i = i0; i < i1; ++i)");
    w_.line("const int c = cursor[i], segs = c > " + SEG + " ? (c + " + SEG + " - 1) / " + SEG + " : 1;");
    w_.line("pn += c, pi += segs, ps += c > " + SEG + " ? segs : 0;");
    e_.closeScope();
    w_.line("const int n = pn, items = pi, slots = ps;");
    w_.line("#pragma unroll");
    e_.openScope("for (int d = 1; d < 32; d *= 2)");
    w_.line("const int a = __shfl_up_sync(0xffffffffu, pn, d), b = __shfl_up_sync(0xffffffffu, pi, d), c = __shfl_up_sync(0xffffffffu, ps, d);");
    w_.line("if (lane >= d) pn += a, pi += b, ps += c;");
    e_.closeScope();
    w_.line("pn -= n, pi -= items, ps -= slots;  // the lanes before this one's");
    e_.openScope("for (int i = i0; i < i1; ++i)");
    w_.line("const int c = cursor[i], segs = c > " + SEG + " ? (c + " + SEG + " - 1) / " + SEG + " : 1;");
    w_.line("rowStart[i] = pn, itemStart[i] = pi, slotStart[i] = ps, cursor[i] = pn;");
    w_.line("pn += c, pi += segs, ps += c > " + SEG + " ? segs : 0;");
    e_.closeScope();
    w_.line("if (lane == 31) rowStart[nrows] = pn, itemStart[nrows] = pi, slotStart[nrows] = ps;");
    e_.closeScope();
    w_.barrier();
  }

  // `csr`: the list sorted by row, stably, into `order`.
  void writeCsrSort() {
    w_.comment("the list sorted by row, stably (so each row's positions stay in position order): warp 0, 32 at a time");
    e_.openScope(kir::ifThen("warp == 0"));
    e_.openScope("for (int h0 = 0; h0 < listed; h0 += 32)");
    w_.let("bool", "valid", "h0 + lane < listed");
    w_.let("unsigned", "x", "valid ? hits[h0 + lane] : 0u");
    w_.let("int", "r", "valid ? (int)(x & 0xffffu) : -1");
    w_.let("unsigned", "peers", "__match_any_sync(0xffffffffu, r)");
    w_.let("int", "leader", "__ffs(peers) - 1");
    w_.var("int", "at", "valid && lane == leader ? cursor[r] : 0");
    w_.assign("at", "__shfl_sync(0xffffffffu, at, leader) + __popc(peers & ((1u << lane) - 1u))");
    w_.openOneLine(kir::ifThen("valid"));
    w_.store("order", "at", "(unsigned short)(x >> 16)");
    w_.close();
    w_.openOneLine(kir::ifThen("valid && lane == leader"));
    w_.store("cursor", "r", "at + __popc(peers)");
    w_.close();
    w_.barrier(kir::SyncScope::Warp);
    e_.closeScope();
    e_.closeScope();
    w_.barrier(kir::SyncScope::Block, "`order` is complete: the list's room takes the partial sums");
  }

  // `csr`: each warp's items, a whole row (summed and stored) or a segment of a long row (its
  // partial sum kept in shared memory).
  void writeCsrItems() {
    const std::string SEG = std::to_string(scatterRowSegment(B_)), U = std::to_string(kHitBatch);
    w_.comment("items: a row (its sum, then its results), or a segment of a long row (a partial sum)");
    e_.openScope("for (int it = warp; it < itemStart[nrows]; it += " + std::to_string(kRangeWarps) + ")");
    w_.line("int r = 0, hi = nrows;  // the row whose items hold it");
    w_.line("while (hi - r > 1) { const int mid = (r + hi) / 2; if (itemStart[mid] <= it) r = mid; else hi = mid; }");
    w_.let("fusec_idx", "v", "row0 + r");
    w_.line("const int first = rowStart[r], count = rowStart[r + 1] - first;");
    w_.let("bool", "part", "count > " + SEG);
    w_.line("const int i0 = first + (part ? (it - itemStart[r]) * " + SEG + " : 0), i1 = part ? min(i0 + " + SEG +
            ", first + count) : first + count;");
    prefetch({}, "!part");
    startRow({}, "part", [] { return std::string("0.0f"); });
    e_.openScope("for (int i = i0; i < i1; i += " + U + ")");
    addBatch([&] {
      w_.openOneLine(kir::countedLoop("u", U, -1));
      w_.assign("s[u]", "i + u < i1 ? (fusec_idx)order[i + u] : (fusec_idx)order[i]");
      w_.close();
      w_.assign("n", "min(" + U + ", i1 - i)");
    });
    e_.closeScope();
    e_.openScope(kir::ifThen("part"));
    eachColumn("partial[(slotStart[r] + it - itemStart[r]) * " + sP_ + " + lane + 32 * q] = acc[q];");
    e_.closeScope();
    e_.openScope(kir::elseIf(""));
    storeRow({});
    e_.closeScope();
    e_.closeScope();
    w_.barrier(kir::SyncScope::Block, "every segment's partial sum is in");
  }

  // `csr`: the rows summed in segments, their partial sums added in segment order.
  void writeCsrSegmentedRows() {
    w_.comment("rows in segments: their partial sums added in segment order, then their results");
    e_.openScope("for (int r = warp; r < nrows; r += " + std::to_string(kRangeWarps) + ")");
    w_.line("const int s0 = slotStart[r], segs = slotStart[r + 1] - s0;");
    w_.line("if (segs == 0) continue;");
    w_.let("fusec_idx", "v", "row0 + r");
    prefetch({}, "");
    startRow({}, "", nullptr);
    e_.openScope("for (int k = 0; k < segs; ++k)");
    eachColumn("acc[q] += partial[(s0 + k) * " + sP_ + " + lane + 32 * q];");
    e_.closeScope();
    storeRow({});
    e_.closeScope();
  }

  // Rounds: list until the list fills (or the ids end), then each warp adds its items' listed
  // positions; a later round adds to what the rows hold.
  void writeRounds() {
    const std::string sPasses = std::to_string(passes_), U = std::to_string(kHitBatch);
    w_.var("bool", "again", "false", "a later round: add to the rows written before");
    e_.openScope("for (fusec_idx t0 = 0;; t0 += " + std::to_string(kRangeStage) + ")");
    w_.let("bool", "end", "t0 >= " + std::to_string(S_));
    e_.openScope(kir::ifThen("end || listed > " + std::to_string(kListed)));
    w_.comment("a round: each warp adds the listed positions of its (row, columns) items, in list order");
    e_.openScope("for (int it = warp; it < nrows" + (passes_ > 1 ? " * " + sPasses : "") + "; it += " +
                 std::to_string(kRangeWarps) + ")");
    w_.let("int", "r", "it" + (passes_ > 1 ? " / " + sPasses : ""));
    if (passes_ > 1) w_.let("fusec_idx", "b0", "(fusec_idx)(it % " + sPasses + ") * " + sP_);
    w_.let("fusec_idx", "v", "row0 + r");
    w_.var("bool", "hit", "!again");
    e_.openScope("for (int h0 = 0; !hit && h0 < listed; h0 += 32)");
    w_.assign("hit", "__any_sync(0xffffffffu, h0 + lane < listed && " + rowAt("h0 + lane") + " == r)");
    e_.closeScope();
    w_.line("if (!hit) continue;  // a later round that does not touch this row");
    startRow({}, "again",
             [&] { return loadExpr(result_->type.dtype, "out" + std::to_string(scatterOuts_.at(0)), outIndex({}, "rb")); });
    e_.openScope("for (int h0 = 0; h0 < listed; h0 += 32)");
    w_.let("bool", "mine", "h0 + lane < listed && " + rowAt("h0 + lane") + " == r");
    w_.var("unsigned", "m", "__ballot_sync(0xffffffffu, mine)");
    e_.openScope("while (m != 0)");
    addBatch([&] {
      e_.openScope(kir::countedLoop("u", U, -1));
      e_.openScope(kir::ifThen("m != 0"));
      w_.assign("s[u]", posAt("h0 + __ffs(m) - 1"));
      w_.line("m &= m - 1;");
      w_.assign("n", "u + 1");
      e_.closeScope();
      w_.openOneLine(kir::elseIf(""));
      w_.assign("s[u]", "s[0]");
      w_.close();
      e_.closeScope();
    });
    e_.closeScope();
    e_.closeScope();
    storeRow({});
    e_.closeScope();
    w_.assign("again", "true");
    w_.assign("listed", "0");
    w_.barrier(kir::SyncScope::Block, "the list's readers are done before it is refilled");
    e_.closeScope();
    w_.line("if (end) break;");
    listStage();
    e_.closeScope();
  }

  // A warp per output row: its positions found by ballot over the ids, or column by column.
  void writeRowLoop() {
    e_.openScope("for (fusec_idx row = ((fusec_idx)blockIdx.x * blockDim.x + threadIdx.x) / 32; row < " +
                 std::to_string(rows_) + "; row += (fusec_idx)gridDim.x * blockDim.x / 32)");
    w_.let("fusec_idx", "v", "row % " + std::to_string(D_));
    const Index a = delinearize(w_, IndexExpr::var("row") / D_, outer_, "a");
    if (passes_ > 1) e_.openScope("for (fusec_idx b0 = 0; b0 < " + sB_ + "; b0 += " + sP_ + ")");
    prefetch(a, "");
    startRow(a, "", nullptr);
    if (ballot_) {
      e_.openScope("for (fusec_idx s0 = 0; s0 < " + std::to_string(S_) + "; s0 += 32)");
      w_.var("bool", "hit", "false");
      e_.openScope(kir::ifThen("s0 + lane < " + std::to_string(S_)));
      w_.let("fusec_idx", "s", "s0 + lane");
      w_.assign("hit", "(fusec_idx)" + e_.eval(index_, join(a, "s", Index(inner_.size(), IndexExpr(0)))) + " == v");
      e_.closeScope();
      w_.comment("the matching positions in increasing order: a fixed order of the additions");
      e_.openScope("for (unsigned m = __ballot_sync(0xffffffffu, hit); m != 0; m &= m - 1)");
      w_.let("fusec_idx", "s", "s0 + __ffs(m) - 1");
      addRow(a, "s");
      e_.closeScope();
      e_.closeScope();
    } else {
      e_.openScope("for (fusec_idx s = 0; s < " + std::to_string(S_) + "; ++s)");
      addRow(a, "s");
      e_.closeScope();
    }
    storeRow(a);
    if (passes_ > 1) e_.closeScope();
    e_.closeScope();
  }

  void writeOtherOutputs() {
    for (const auto& [numel, outs] : otherOuts_) {
      w_.comment("outputs not computed from the table (the source's producers), element by element");
      e_.openScope("for (fusec_idx i = (fusec_idx)blockIdx.x * blockDim.x + threadIdx.x; i < " + std::to_string(numel) +
                   "; i += (fusec_idx)gridDim.x * blockDim.x)");
      for (int o : outs) {
        const Value* v = k_.body.outputs[size_t(o)];
        e_.store(v, "out" + std::to_string(o), delinearize(w_, IndexExpr::var("i"), v->type.shape, "p" + std::to_string(o)));
      }
      e_.closeScope();
    }
  }

  const FamilyInput& k_;
  KernelBuilder& w_;
  BodyEmitter e_;
  const Op* scatter_ = nullptr;
  const Value *result_ = nullptr, *base_ = nullptr, *index_ = nullptr, *src_ = nullptr;
  std::vector<int> scatterOuts_, tableOuts_;
  std::map<int64_t, std::vector<int>> otherOuts_;  // by element count
  bool epilogue_ = false;
  std::vector<const Value*> prefetched_;
  Shape outer_, inner_;  // the result's dims before and after the scatter axis
  int64_t D_ = 0, S_ = 0, B_ = 0, rows_ = 0;  // rows along the axis, source positions, columns, output rows
  bool ballot_ = false, ranged_ = false, csr_ = false, packed_ = false;
  int64_t passes_ = 1, perPass_ = 0, Q_ = 0;  // column passes, columns a pass, columns a lane
  std::string rt_, sB_, sP_, sQ_;
  int block_ = kBlock;
  int64_t grid_ = 1, range_ = 0, listSize_ = 0;
  uint32_t smem_ = 0;
};

}  // namespace

std::vector<Launch> emitScatter(const FamilyInput& k, KernelBuilder& w) { return ScatterEmitter(k, w).emit(); }

}  // namespace fusec::codegen
