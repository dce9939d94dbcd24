// The `attention` family: a kernel whose body is one attention (forward) or
// attention_backward composite over views of its inputs becomes a flash-attention kernel
// (codegen/attention_sources.h), specialised at generation time:
//   * shapes, the scale and causality are constants of the source;
//   * operands are read in place through their views: each view's offset and strides are
//     baked into the source as a per-(batch index) offset and a row stride (the head dim
//     must have unit stride, which fuse guarantees: passes/fusion/plan.cpp attentionUse).
//     So q, k, v come straight from the fused QKV GEMM's output or a RoPE kernel, in any
//     [B, T, H, d] / [B, H, T, d] arrangement, with no permute copy. The kernel ABI stays as
//     it is (one pointer per operand, kernel_abi.h): the strides live in the source, which
//     is possible because every shape is static;
//   * results are dense, except the forward's O when fuse stored it permuted (the kernel's
//     result is permute(O) keeping the head dim last: passes/fusion/attention_output.h):
//     its per-batch-index offset and row stride come from that permute, so the output
//     projection reads [B, T, H, d] without a copy kernel. An unused result (dropped by dce)
//     is a null pointer in the call.
// Forward: one launch, a block per (query rows, batch index). Backward: two launches, dq (a
// block per query rows) and then dk, dv (a block per key rows): deterministic, no atomics. On
// tensor cores the dq launch also leaves each query row's softmax statistics in a module-scope
// array for the dk, dv launch (attention_mma.cuh). Short bf16 sequences (up to
// Target::shortBackwardMaxSeq) take one launch instead, a block per head with every row in
// shared memory (attention_mma.cuh fa_backward_short).
// Three templates behind the same arguments: Hopper's warpgroup MMA for bf16 at d = dv of 64
// or 128 (codegen/attention_wgmma.cuh: the forward always, the backward from 1024 queries;
// entry points fa_forward_wgmma, fa_backward_dq_wgmma, fa_backward_dkdv_wgmma), tensor cores
// by mma.sync for the rest of bf16 (m16n8k16) and for f32 (3xTF32 m16n8k8, f32-accurate) at
// head dims 16..128 (multiples of 16; codegen/attention_mma.cuh, 16 rows per warp, tiling per
// head dim and precision below), SIMT for the rest (attention_simt.cuh, 64 rows per block);
// the choice and its reason open the source (`// path: ...`).
#include <cctype>
#include <cmath>
#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <optional>

#include "codegen/attention_smem.h"
#include "codegen/attention_sources.h"
#include "codegen/cuda_types.h"
#include "codegen/family_emitters.h"
#include "ir/attention_assembly.h"
#include "ir/attention_path.h"
#include "ir/strided_view.h"
#include "ir/type_rules.h"

namespace fusec::codegen {

namespace {

constexpr int kThreads = 128, kRows = 64;  // the SIMT template's block

std::string ll(int64_t v) { return std::to_string(v) + "LL"; }

// A float literal that reads back as the nearest float to `v`.
std::string fmtFloat(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9ef", v);
  return buf;
}

// How an attention operand is read: which kernel operand, and its offset per batch index
// and row stride (elements).
struct OperandAccess {
  int input = -1;
  std::string batchOffset;  // C++ expression in `z`
  int64_t rowStride = 0;
  bool aligned16 = true;  // every row starts a multiple of 16 bytes from the operand's start
};

// The offset of batch index z (over the first `batchDims` dims of `s`, row-major) as a C++
// expression. `group` > 1: z is the query's batch index and this operand (grouped-query
// attention's k or v) has 1/group of its heads, so its own batch index is z / group.
std::string batchOffset(const Shape& s, const std::vector<int64_t>& strides, int64_t offset, int batchDims,
                        int64_t group = 1) {
  std::string e = ll(offset);
  const std::string index = group > 1 ? "((long long)z / " + ll(group) + ")" : "(long long)z";
  int64_t inner = 1;
  for (int d = batchDims - 1; d >= 0; --d) {
    const int64_t n = s[size_t(d)], st = strides[size_t(d)];
    if (n != 1 && st != 0) e += " + (" + index + " / " + ll(inner) + " % " + ll(n) + ") * " + ll(st);
    inner *= n;
  }
  return e;
}

OperandAccess accessOf(const Value* v, const Graph& body, const std::string& what, bool rowsAreLast, int64_t group = 1) {
  auto view = resolveView(v);
  const auto inputs = body.inputs();
  OperandAccess a;
  if (view)
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i]->result() == view->base) a.input = int(i);
  const std::string where = "codegen: attention kernel '" + body.name + "': ";
  if (!view || a.input < 0) throw Error(where + what + " is not a view of a kernel operand");
  const Shape& s = v->type.shape;
  const int r = v->type.rank();
  // [batch..., T, W] (or [batch..., T] for lse): the batch dims are all but the last one or two.
  const int batchDims = rowsAreLast ? r - 1 : r - 2;
  const int64_t unit = view->strides[size_t(r - 1)];
  if (unit != 1 && s[size_t(r - 1)] != 1) throw Error(where + what + " has no unit stride along its last dim");
  a.rowStride = rowsAreLast ? 1 : view->strides[size_t(r - 2)];
  a.aligned16 = attentionRowsAligned(*view, s, dtypeBytes(v->type.dtype), rowsAreLast);
  a.batchOffset = batchOffset(s, view->strides, view->offset, batchDims, group);
  return a;
}

// Where the forward stores O ([batch..., T, d]): its row stride and the offset of batch index z.
struct OutputStore {
  int64_t rowStride = 0;
  std::string batchOffset;
};

// O stored as the result `p` = permute(O, perm), row-major: O's stride along perm[k] is the
// result's stride along k.
OutputStore permutedOutput(const Shape& o, const Shape& p, const std::vector<int64_t>& perm) {
  std::vector<int64_t> dense(p.size(), 1), strides(o.size(), 0);
  for (size_t k = p.size(); k-- > 1;) dense[k - 1] = dense[k] * p[k];
  for (size_t k = 0; k < perm.size(); ++k) strides[size_t(perm[k])] = dense[k];
  const int r = int(o.size());
  return {strides[size_t(r - 2)], batchOffset(o, strides, 0, r - 2)};
}

// The mma template's tiling for head dim d (codegen/attention_mma.cuh's FA_WARPS, FA_BC,
// FA_BQ, FA_QREG).
struct MmaTiling {
  int warps = 4;  // 16 rows each: a block owns 16 * warps query (or, in dK/dV, key) rows
  int bc = 64;    // the forward's and dQ's key tile
  int bq = 64;    // dK/dV's query tile
  bool qInRegisters = true;
  int dkdvMinBlocks = 0;  // __launch_bounds__'s blocks per SM for dK/dV (0: ptxas's choice)
  bool dqOTile = false;   // dQ sums the row statistics from an o tile (else from global memory)
};

MmaTiling mmaTiling(int64_t d, int64_t tq, bool backward, bool tf32) {
  MmaTiling t;
  if (tf32) {
    // f32 tiles take twice the shared memory of bf16 ones: at d 64, 64-key tiles (87 KB
    // forward, 104 KB dQ) and 32-query dK/dV tiles (87 KB) keep two blocks per SM; at d 128
    // the tiles halve again. Split Q fragments (d registers: 8 per k8 chunk) would not fit
    // beside the accumulators: Q is read from shared memory per tile.
    t.bc = d > 64 ? 32 : 64;
    t.bq = d > 64 ? 16 : 32;
    t.qInRegisters = false;
    return t;
  }
  // Above d 64, dK/dV's two 16 x d accumulators per warp leave room for 16 x 32 strips of S^T
  // and dP^T only (ptxas: 240 registers, no spills). At d 64, 32-query tiles are faster up to
  // 1024 queries (less of each causal diagonal tile is masked work: N 256, 768 heads, 0.107
  // vs 0.116 ms; N 1024 0.280 vs 0.293) and 64 above (N 4096: 0.332 vs 0.349 ms; kernel
  // only, bench/attention_mma_tune, H200).
  t.bq = d > 64 || tq <= 1024 ? 32 : 64;
  // The forward's Q fragments (d / 4 registers) stay in registers, sparing a shared read per
  // key tile, except at d 64 where they would push it past 128 registers (ptxas then spills):
  // there Q is read from shared memory per tile, measured as fast (bench/RESULTS.md).
  t.qInRegisters = backward || d != 64;
  // dK/dV at d <= 64 takes 135 registers a thread, which leaves 3 blocks of 4 warps per SM;
  // at 128 (8 bytes of spills) 4 fit: N 256, 768 heads, 0.096 -> 0.093 ms; N 1024 0.234 ->
  // 0.229 ms (kernel only, bench/attention_mma_tune, H200). Keeping K and V fragments in
  // registers instead (170 registers, 2 blocks) measured 0.106 ms. The dQ pass at 128
  // registers was slower (0.076 -> 0.081 ms).
  if (d <= 64) t.dkdvMinBlocks = 4;
  // dQ reading o as a tile beside q and dO spares each block a wait on global loads before
  // its first key tile: N 256, 768 heads, 0.079 -> 0.073 ms; N 1024 0.163 -> 0.157. At d 128
  // the tile (17 KB) leaves one block per SM instead of two: 0.164 -> 0.199 ms. In f32 the
  // tiles are twice as large, so there too it stays off.
  t.dqOTile = d <= 64;
  return t;
}

// An operand's row stride FA_<NAME>_RS and batch offset fa_<name>_batch(z), as the templates read them.
void writeOperandMacros(KernelBuilder& w, const std::string& name, const OperandAccess& a) {
  std::string up = name;
  for (char& c : up) c = char(std::toupper(static_cast<unsigned char>(c)));
  w.define("FA_" + up + "_RS", ll(a.rowStride));
  w.line("__device__ __forceinline__ long long fa_" + name + "_batch(int z) { return " + a.batchOffset + "; }");
}

// The mma template's precision and tiling constants.
void writeTilingMacros(KernelBuilder& w, const MmaTiling& t, bool tf32) {
  w.define("FA_TF32", tf32 ? "1" : "0");
  w.define("FA_WARPS", std::to_string(t.warps));
  w.define("FA_BC", std::to_string(t.bc));
  w.define("FA_BQ", std::to_string(t.bq));
  w.define("FA_QREG", t.qInRegisters ? "1" : "0");
  w.define("FA_DQ_OTILE", t.dqOTile ? "1" : "0");
}

// Which template runs a kernel, and its tiling. Tensor cores (codegen/attention_mma.cuh)
// where their fragments fit: bf16 or f32 (3xTF32), equal head dims that are multiples of 16
// up to 128, rows cp.async can copy (16-byte aligned). The SIMT template covers the rest (fp16,
// d 8/24/..., strides off by a few elements).
struct AttentionPath {
  bool tf32 = false, mma = false, wgmma = false;
  // The wgmma forward or dK/dV pass with a producer warpgroup (fa_forward_wgmma_ws,
  // fa_backward_dkdv_wgmma_ws): one warpgroup more than the tiling's warps in that launch,
  // copying the walked tiles into a ring of `stages` buffers.
  bool producer = false;
  int stages = 0;
  // The bf16 causal backward on wgmma in one pass (Target::wgmmaFusedDq): the dK/dV launch
  // computes dQ too, after a statistics-only dQ launch; 2: with a dQ writer warpgroup.
  int fusedDq = 0;
  // The mma backward as one launch with every row resident (attention_mma.cuh
  // fa_backward_short): the tiling's warps cover the longer length.
  bool shortBackward = false;
  // The mma forward as one launch with every row resident (attention_mma.cuh
  // fa_forward_short): a block per head, each warp two 16-row query strips.
  bool shortForward = false;
  bool shortDs = false;  // it keeps dS^T in shared memory (FA_SHORT_DS, Target::shortBackwardDs)
  std::string simtWhy;  // why not tensor cores ("" when mma)
  MmaTiling tiling;
  int threads = kThreads, rows = kRows;
};

AttentionPath choosePath(const Op& att, int64_t batch, int64_t Tq, int64_t Tk, int64_t group, const std::vector<OperandAccess>& acc,
                         const Target& target) {
  const bool backward = att.kind == OpKind::AttentionBackward;
  const Type& q = att.operands[0]->type;
  const int64_t D = q.shape.back(), DV = att.operands[2]->type.shape.back();
  const char* names[] = {"q", "k", "v", "o", "do", "lse"};
  AttentionPath p;
  p.tf32 = q.dtype == DType::f32;
  std::string& simtWhy = p.simtWhy;
  simtWhy = attentionSimtReason(att);  // ir/attention_path.h: the planner asks the same
  for (size_t i = 0; simtWhy.empty() && i < std::min<size_t>(acc.size(), 5); ++i)
    if (!acc[i].aligned16) simtWhy = std::string(names[i]) + "'s rows are not 16-byte aligned";
  p.mma = simtWhy.empty();
  // Hopper's warpgroup MMA (codegen/attention_wgmma.cuh) for bf16 at d = dv of 64 or 128,
  // where the target has it: the forward from Target::wgmmaForwardMinSeq keys; the backward
  // from Target::wgmmaBackwardMinSeq queries (1024). Its blocks are 128 rows on one SM each, and on
  // short sequences their few tiles leave the prologue and the stores exposed where four 64-row
  // mma blocks an SM overlap them: small's bf16 train step at ctx 256, batch 64 (H200) took
  // 27.44 ms with the mma backward and 27.81 with wgmma's, while at N 4096 the backward on
  // wgmma is 1.5x faster (bench/RESULTS.md).
  p.wgmma = p.mma && !p.tf32 && D == DV && (D == 64 || D == 128) && target.hasWgmma() &&
            (backward ? Tq >= target.wgmmaBackwardMinSeq : Tk >= target.wgmmaForwardMinSeq);
  // The mma template's tiling (codegen/attention_mma.cuh): warps per block (16 rows each),
  // dK/dV's query tile, and whether the forward keeps its Q fragments in registers.
  p.tiling = mmaTiling(D, Tq, backward, p.tf32);
  if (p.wgmma) {
    // Two warpgroups of 64 rows a block. The forward's key tile is 128 (one wgmma's n); the
    // backward's key (dQ) and query (dK/dV) tiles are 64, so that dK and dV (or dQ) and the
    // two score tiles of d 128 fit a thread's registers.
    p.tiling.warps = 8;
    p.tiling.bc = backward ? 64 : 128;
    p.tiling.bq = 64;
    p.tiling.dqOTile = false;
  }
  // Short sequences' bf16 backward in one launch (Target::shortBackwardMaxSeq): a block per
  // head whose 16-row warps cover the longer length rounded up to whole 32-row tiles (at most
  // 16 warps: 128 registers a thread, which the dK/dV accumulators of d <= 64 fit), q, dO, k
  // and v whole in its shared memory. Grouped-query attention keeps the two passes, whose
  // dK/dV blocks sum a group's query heads.
  const int64_t longest = std::max(Tq, Tk), shortRows = (longest + 31) / 32 * 32;
  // Short sequences' bf16 forward in one launch (Target::shortForwardMaxSeq), instead of the
  // wgmma or mma forward's query tiles that each copy their key tiles again: a block per head,
  // q, k and v whole in shared memory, two blocks an SM (at d 64 and 256 rows, 110 KB each);
  // the mma forward's key tiles and products, so its results bit for bit. Its rows are whole
  // key tiles (the template reads every tile whole). A block a head fills the GPU only with
  // enough heads (Target::shortForwardMinHeadsPerSm): medium b4's 64 heads left half the SMs
  // idle where the tiled forward has two blocks a head (bench/RESULTS.md). Causal
  // self-attention only, the form its strips are paired for and its GPU test runs.
  if (!backward && p.mma && !p.tf32 && group == 1 && D <= 64 && DV <= 64 && att.attrBool("causal") && Tq == Tk &&
      longest <= target.shortForwardMaxSeq && batch >= int64_t(target.shortForwardMinHeadsPerSm) * target.sms) {
    const MmaTiling mma = mmaTiling(D, Tq, false, false);  // the mma forward's, not wgmma's
    const int64_t unit = std::max<int64_t>(32, mma.bc), rows = (longest + unit - 1) / unit * unit;
    const AttentionTiles t{D, DV, 2, rows, mma.bc, mma.bq, false, 0, 0};
    if (rows <= 256 && 2 * (shortForwardSmemLayout(t).bytes() + target.smemReservedPerBlock) <= target.smemPerSm) {
      p.wgmma = false;
      p.shortForward = true;
      p.tiling = mma;
      p.tiling.warps = int(rows / 32);
    }
  }
  if (p.mma && !p.wgmma && !p.tf32 && backward && group == 1 && D <= 64 && longest <= target.shortBackwardMaxSeq &&
      shortRows <= 256) {
    // dS kept in shared memory (FA_SHORT_DS) for causal self-attention at d = dv, where its
    // triangle fits beside the rows.
    AttentionTiles t{D, DV, 2, shortRows, 32, 32, false, 0, 0}, kept = t;
    kept.shortDs = true;
    if (target.shortBackwardDs && att.attrBool("causal") && Tq == Tk && D == DV &&
        shortBackwardSmemLayout(kept).bytes() <= target.smemPerBlock)
      t = kept;
    if (shortBackwardSmemLayout(t).bytes() <= target.smemPerBlock) {
      p.shortBackward = true;
      p.shortDs = t.shortDs;
      p.tiling.warps = int(shortRows / 16);
      p.tiling.bc = p.tiling.bq = 32;
    }
  }
  if (p.mma) p.threads = 32 * p.tiling.warps, p.rows = 16 * p.tiling.warps;
  if (p.wgmma && (backward ? target.wgmmaProducerBackward : target.wgmmaProducer)) {
    p.producer = true;
    p.stages = 2;
  }
  // One pass needs every query tile seen by key block 0 and the last key block that sees a
  // tile known in closed form: causal self-attention (Tq == Tk). The dK/dV kernel without a
  // producer has it.
  p.fusedDq = p.wgmma && backward && !p.producer && att.attrBool("causal") && Tq == Tk ? target.wgmmaFusedDq : 0;
  return p;
}

// Which kernel result `out<i>` each result of the attention op is stored to; the forward's O
// may be a permute of it (see the top), stored through `oStore`. The backward's dq, dk and dv
// are stored through `gradStore` (dense, or their parts of one assembled result: see
// ir/attention_assembly.h), dq and dk rotated by RoPE's tables where `rope` names them.
struct AttentionOutputs {
  std::map<int, int> kernelResult;  // the attention op's result index -> i of out<i>
  std::optional<OutputStore> oStore;
  std::array<OutputStore, 3> gradStore;
  std::array<std::pair<int, int>, 3> rope{{{-1, -1}, {-1, -1}, {-1, -1}}};  // kernel inputs: cos, sin
  bool assembled = false;  // some result stored elsewhere than dense at its own out<i>
};

// The kernel input `v` is (a table RoPE's rotation reads).
int inputIndex(const Graph& body, const Value* v, const std::string& where) {
  const auto inputs = body.inputs();
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i]->result() == v) return int(i);
  throw Error(where + "a RoPE table of the stored gradients is not a kernel operand");
}

AttentionOutputs attentionOutputs(const Graph& body, const Op* att, const std::string& where, bool backward, int64_t Tq,
                                  int64_t DV) {
  AttentionOutputs r;
  if (backward)
    for (int i = 0; i < 3; ++i) {  // dense unless assembled below
      const Shape& s = att->result(i)->type.shape;
      const int n = int(s.size());
      r.gradStore[size_t(i)] = {s[size_t(n - 1)], "(long long)z * " + ll(s[size_t(n - 2)] * s[size_t(n - 1)])};
    }
  for (size_t i = 0; i < body.outputs.size(); ++i) {
    const Value* v = body.outputs[i];
    std::vector<int> results = {v->index};
    if (v->def != att && backward) {
      auto parts = matchAttentionAssembly(v, *att);
      if (!parts) throw Error(where + "result " + std::to_string(i) + " is neither the attention's nor assembled from its results");
      results.clear();
      for (const AssemblyPart& p : *parts) {
        const Shape& s = att->result(p.result)->type.shape;
        const int n = int(s.size());
        r.gradStore[size_t(p.result)] = {p.strides[size_t(n - 2)], batchOffset(s, p.strides, p.offset, n - 2)};
        if (p.cos) r.rope[size_t(p.result)] = {inputIndex(body, p.cos, where), inputIndex(body, p.sin, where)};
        results.push_back(p.result);
      }
      r.assembled = true;
    } else if (v->def != att) {
      const Value* o = v->def->operands.at(0);
      if (v->def->kind != OpKind::Permute || o->def != att || o->index != 0)
        throw Error(where + "result " + std::to_string(i) + " is neither the attention's nor its output permuted");
      r.oStore = permutedOutput(o->type.shape, v->type.shape, v->def->attrInts("perm"));
      results = {0};
    }
    for (int result : results) {
      if (r.kernelResult.count(result)) throw Error(where + "stores the attention's result " + std::to_string(result) + " twice");
      r.kernelResult[result] = int(i);
    }
  }
  if (!backward && !r.oStore) r.oStore = OutputStore{DV, "(long long)z * " + ll(Tq * DV)};  // dense
  return r;
}

// The operands' names in the templates' macros (FA_Q_*, ...), in the attention ops' order.
const char* const kOperandNames[] = {"q", "k", "v", "o", "do", "lse"};

// The attention's sizes: batch x heads of the query, sequence lengths, head dims, and the query
// heads that read one key/value head.
struct AttentionShape {
  int64_t batch, Tq, Tk, D, DV, group;
};

// The comment lines and the FA_* macros the templates read: the shape, the scale, the
// operands' and the output's addressing, the path's tiling and producer switches.
void writeAttentionMacros(KernelBuilder& w, const Op& att, const AttentionShape& a, const AttentionPath& path,
                          const AttentionOutputs& outputs, const std::vector<OperandAccess>& acc, const std::string& where) {
  const bool backward = att.kind == OpKind::AttentionBackward, mma = path.mma, wgmma = path.wgmma, tf32 = path.tf32;
  const double scale = att.attrFloat("scale");
  w.comment(std::string(backward ? "attention_backward" : "attention") + ": batch " + std::to_string(a.batch) + ", Tq " +
         std::to_string(a.Tq) + ", Tk " + std::to_string(a.Tk) + ", d " + std::to_string(a.D) + ", dv " + std::to_string(a.DV) +
         (att.attrBool("causal") ? ", causal" : "") + (a.group > 1 ? ", " + std::to_string(a.group) + " query heads a key/value head" : ""));
  w.comment(!mma    ? "path: SIMT (FFMA): " + path.simtWhy
            : wgmma ? std::string("path: tensor cores (wgmma m64nNk16 bf16 from shared memory, f32 accumulation") +
                          (path.fusedDq == 2 ? ", dQ in the dK/dV pass, a dQ writer warpgroup)"
                           : path.fusedDq   ? ", dQ in the dK/dV pass)"
                           : !path.producer ? ")"
                           : backward       ? ", dK/dV with a producer warpgroup)"
                                            : ", a producer warpgroup)")
            : tf32  ? std::string("path: tensor cores (mma.sync m16n8k8 3xTF32: f32 operands as two tf32 terms, f32 accumulation)")
            : path.shortBackward || path.shortForward
                ? std::string("path: tensor cores (mma.sync m16n8k16 bf16, f32 accumulation; one launch, every row in shared memory)")
                : std::string("path: tensor cores (mma.sync m16n8k16 bf16, f32 accumulation)"));
  w.define("FA_BACKWARD", backward ? "1" : "0");
  if (path.shortBackward) {
    w.define("FA_SHORT", "1", "one launch: fa_backward_short");
    w.define("FA_SHORT_DS", path.shortDs ? "1" : "0", path.shortDs ? "dQ from dS^T kept in shared memory, warps in pairs" : "dQ from S and dP again");
  }
  if (path.shortForward) w.define("FA_SHORT_FWD", "1", "one launch: fa_forward_short");
  w.line("typedef " + storageType(att.operands[0]->type.dtype) + " fa_t;");
  w.define("FA_D", std::to_string(a.D));
  w.define("FA_DV", std::to_string(a.DV));
  w.define("FA_TQ", std::to_string(a.Tq));
  w.define("FA_TK", std::to_string(a.Tk));
  w.define("FA_CAUSAL", att.attrBool("causal") ? "true" : "false");
  w.define("FA_SCALE", fmtFloat(scale));
  w.define("FA_GROUP", std::to_string(a.group), "query heads a key/value head");
  w.define("FA_SCALE_LOG2", fmtFloat(scale * 1.4426950408889634));
  if (!backward) {
    w.define("FA_OUT_RS", ll(outputs.oStore->rowStride), "O's row stride in its result");
    w.line("__device__ __forceinline__ long long fa_out_batch(int z) { return " + outputs.oStore->batchOffset + "; }");
  }
  if (backward) {
    const char* const grads[][2] = {{"dq", "DQ"}, {"dk", "DK"}, {"dv", "DV"}};
    for (int i = 0; i < 3; ++i) {
      const OutputStore& st = outputs.gradStore[size_t(i)];
      w.define(std::string("FA_") + grads[i][1] + "_OUT_RS", ll(st.rowStride), std::string(grads[i][0]) + "'s row stride in its result");
      w.line(std::string("__device__ __forceinline__ long long fa_") + grads[i][0] + "_out(int z) { return " + st.batchOffset + "; }");
    }
  }
  for (int i = 0; i < int(acc.size()); ++i) writeOperandMacros(w, kOperandNames[i], acc[size_t(i)]);
  if (mma) {
    writeTilingMacros(w, path.tiling, tf32);
    if (path.producer) {
      // attention_wgmma.cuh fa_forward_wgmma_ws: its ring's buffers, the two consumers' turns
      // (pingpong), and registers moved from the producer to the consumers (setmaxnreg).
      w.define("FA_WG_PRODUCER", "1");
      w.define("FA_WG_STAGES", std::to_string(path.stages));
      w.define("FA_WG_PINGPONG", "1");
      w.define("FA_WG_MAXNREG", "1");
    }
    // The backward's row statistics, a float2 per (batch index, query row): 1/8 of q's bytes
    // at most (d 16 bf16), so a shape whose q fits has room for them.
    if (backward) {
      const int64_t rows = std::max<int64_t>(1, a.batch * a.Tq);
      if (rows * 8 > (int64_t(1) << 31))
        throw Error(where + "the backward's row statistics take more than 2 GiB (" + std::to_string(rows) + " rows)");
      w.define("FA_ROWSTATS", std::to_string(rows));
    }
    if (wgmma) w.define("FA_WG_FUSED_DQ", std::to_string(path.fusedDq));
    if (path.fusedDq == 2) {  // the writer's registers to the consumers: 2 x 128 x 240 + 128 x 24
      w.define("FA_WG_MAXNREG", "1");
      w.define("FA_WG_REGS", "240");
    }
    if (path.fusedDq) {
      // dQ's f32 sums (a query tile of 64 rows x d each) and their turn counters
      // (attention_wgmma.cuh addDq), module-scope like the row statistics.
      const int64_t tiles = std::max<int64_t>(1, a.batch * ((a.Tq + 63) / 64));
      if (tiles * 64 * a.D * 4 > (int64_t(1) << 31))
        throw Error(where + "the one-pass backward's dQ sums take more than 2 GiB (FUSEC_WGMMA_FUSED_DQ=0 runs two passes)");
      w.define("FA_DQTILES", std::to_string(tiles));
    }
  }
}

}  // namespace

std::vector<Launch> emitAttention(const FamilyInput& k, KernelBuilder& w) {
  const Op* att = nullptr;
  for (auto& op : k.body.ops)
    if (op->kind == OpKind::Attention || op->kind == OpKind::AttentionBackward) att = op.get();
  const std::string where = "codegen: attention kernel '" + k.body.name + "': ";
  if (!att) throw Error(where + "no attention op");
  const bool backward = att->kind == OpKind::AttentionBackward;
  const Type &q = att->operands[0]->type, &kt = att->operands[1]->type, &vt = att->operands[2]->type;
  const int r = q.rank();
  const int64_t Tq = q.shape[size_t(r - 2)], Tk = kt.shape[size_t(r - 2)], D = q.shape[size_t(r - 1)],
                DV = vt.shape[size_t(r - 1)];
  const int64_t batch = Tq * D == 0 ? 0 : q.numel() / (Tq * D);
  // Grouped-query attention (ops.def): `group` query heads read each key/value head.
  const int64_t group = attentionGroup(q, kt), kvBatch = batch / group;
  if (D % 8 != 0 || DV % 8 != 0 || D > 256 || DV > 256)
    throw Error(where + "head dims must be multiples of 8 up to 256, got " + std::to_string(D) + " and " +
                std::to_string(DV) + " (use --attention=naive)");
  if (batch > 65535) throw Error(where + "more than 65535 batch x heads (" + std::to_string(batch) + ")");
  if (Tq >= (1LL << 30) || Tk >= (1LL << 30)) throw Error(where + "sequence too long");

  const AttentionOutputs outputs = attentionOutputs(k.body, att, where, backward, Tq, DV);
  const std::map<int, int>& outOf = outputs.kernelResult;
  auto out = [&](int result) { return outOf.count(result) ? "out" + std::to_string(outOf.at(result)) : std::string("nullptr"); };

  const int operands = backward ? 6 : 3;
  std::vector<OperandAccess> acc;
  for (int i = 0; i < operands; ++i)
    acc.push_back(accessOf(att->operands[size_t(i)], k.body, kOperandNames[i], i == 5, i == 1 || i == 2 ? group : 1));

  AttentionPath path = choosePath(*att, batch, Tq, Tk, group, acc, k.target);
  if (outputs.assembled) {
    // The stores into an assembled result (row strides, RoPE) are the tensor-core templates'
    // storeRows; the planner asks ir/attention_path.h before it makes such a kernel.
    if (!path.mma) throw Error(where + "stores its gradients into an assembled result, which needs tensor cores, but " + path.simtWhy);
    path.fusedDq = 0;  // the one-pass dQ sums store dense dQ (attention_wgmma.cuh addDq)
  }
  const bool mma = path.mma, wgmma = path.wgmma;
  const MmaTiling& tiling = path.tiling;
  const int threads = path.threads, rows = path.rows;

  writeAttentionMacros(w, *att, AttentionShape{batch, Tq, Tk, D, DV, group}, path, outputs, acc, where);
  // The launches' shared memory, laid out once (attention_smem.h): every included template's
  // layouts are written (a wgmma source holds the mma text too, compiled though not launched),
  // and the launch takes its size from the same layout.
  std::vector<SmemLayout> layouts = simtSmemLayouts(D, DV, kRows);
  int64_t shortBytes = 0;  // the one-launch backward's (path.shortBackward)
  if (mma) {
    const AttentionTiles tiles{D, DV, int64_t(dtypeBytes(q.dtype)), rows, tiling.bc, tiling.bq, tiling.dqOTile,
                               path.stages, path.fusedDq};
    layouts = mmaSmemLayouts(tiles);
    if (path.shortForward) {
      AttentionTiles shortTiles = tiles;
      shortTiles.rows = 2 * rows;  // two strips a warp
      const SmemLayout shortLayout = shortForwardSmemLayout(shortTiles);
      writeSmemMacros(w, shortLayout);
      shortBytes = shortLayout.bytes();
    }
    if (path.shortBackward) {
      AttentionTiles shortTiles = tiles;
      shortTiles.shortDs = path.shortDs;
      const SmemLayout shortLayout = shortBackwardSmemLayout(shortTiles);
      writeSmemMacros(w, shortLayout);
      shortBytes = shortLayout.bytes();
    }
    if (wgmma) {
      for (const SmemLayout& l : layouts) writeSmemMacros(w, l);
      layouts = wgmmaSmemLayouts(tiles);
    }
  }
  for (const SmemLayout& l : layouts) writeSmemMacros(w, l);
  const int64_t fwdBytes = (path.producer ? layouts.at(3) : layouts[0]).bytes(), dqBytes = layouts[1].bytes(),
                dkdvBytes = (path.producer ? layouts.at(4) : layouts[2]).bytes();
  // The launch that has the producer (or the dQ writer): one warpgroup more.
  const int producerThreads = threads + (path.producer || path.fusedDq == 2 ? 128 : 0);
  w.line(attentionCommonSource());
  w.line(mma ? attentionMmaSource() : attentionSimtSource());
  if (wgmma) w.line(attentionWgmmaSource());

  auto in = [&](int i) { return "in" + std::to_string(acc[size_t(i)].input); };
  const uint32_t qTiles = uint32_t((Tq + rows - 1) / rows), kTiles = uint32_t((Tk + rows - 1) / rows);
  const uint32_t zs = uint32_t(std::max<int64_t>(batch, 1)), kvZs = uint32_t(std::max<int64_t>(kvBatch, 1));
  std::vector<Launch> launches;
  // `batches`: the query's batch indices, or the key/value's for the dK/dV pass.
  auto launch = [&](const std::string& fn, int blockThreads, uint32_t tiles, int64_t bytes, const std::string& call,
                    int minBlocks = 0, uint32_t batches = 0) {
    k.signature(w, fn, blockThreads, minBlocks);
    w.line(call);
    w.close();
    // The mma template takes the batch index from x (so blocks start longest tile first across
    // every head), the SIMT one from y.
    const uint32_t t = std::max<uint32_t>(tiles, 1), z = batches ? batches : zs;
    launches.push_back(Launch{fn, mma ? std::array<uint32_t, 3>{z, t, 1} : std::array<uint32_t, 3>{t, z, 1},
                              {uint32_t(blockThreads), 1, 1}, uint32_t(bytes)});
  };
  if (path.shortForward) {  // one launch, a block per head, two an SM
    launch(k.name, threads, 1, shortBytes, "fa_forward_short(" + in(0) + ", " + in(1) + ", " + in(2) + ", " + out(0) + ", " + out(1) + ");", 2);
    return launches;
  }
  if (!backward) {
    launch(k.name, producerThreads, qTiles, fwdBytes,
           std::string(path.producer ? "fa_forward_wgmma_ws(" : wgmma ? "fa_forward_wgmma(" : "fa_forward(") + in(0) +
               ", " + in(1) + ", " + in(2) + ", " + out(0) + ", " + out(1) + ");",
           wgmma ? 1 : 0);
    return launches;
  }
  const std::string common = in(0) + ", " + in(1) + ", " + in(2) + ", " + in(3) + ", " + in(4) + ", " + in(5);
  // RoPE's tables for dQ's and dK's stores (attention_mma.cuh FaRope), where a rotation was matched.
  std::string rope;
  if (outputs.rope[0].first >= 0 || outputs.rope[1].first >= 0) {
    auto table = [&](int i) { return i >= 0 ? "in" + std::to_string(i) : std::string("nullptr"); };
    rope = ", fa::FaRope{" + table(outputs.rope[0].first) + ", " + table(outputs.rope[0].second) + ", " +
           table(outputs.rope[1].first) + ", " + table(outputs.rope[1].second) + "}";
  }
  if (path.shortBackward) {  // one launch, a block per head
    launch(k.name + "_bwd", threads, 1, shortBytes,
           "fa_backward_short(" + common + ", " + out(0) + ", " + out(1) + ", " + out(2) + rope + ");", 1);
    return launches;
  }
  // The mma dQ pass also writes the row statistics the dK/dV pass reads, so it runs even when
  // dq is unused (a null dq: statistics only). In one pass (fusedDq) it is only that, and the
  // dK/dV launch computes dq.
  const bool anyDkdv = outOf.count(1) || outOf.count(2), dkdvLaunch = anyDkdv || (path.fusedDq && outOf.count(0));
  if (outOf.count(0) || (mma && anyDkdv))
    launch(k.name + "_dq", threads, qTiles, path.fusedDq ? 0 : dqBytes,  // statistics only: no tiles
           std::string(wgmma ? "fa_backward_dq_wgmma(" : "fa_backward_dq(") + common + ", " +
               (path.fusedDq ? std::string("nullptr") : out(0)) + rope + ");",
           wgmma ? 1 : 0);
  if (dkdvLaunch)
    launch(k.name + "_dkdv", producerThreads, kTiles, dkdvBytes,
           std::string(path.producer       ? "fa_backward_dkdv_wgmma_ws("
                       : path.fusedDq == 2 ? "fa_backward_dkdv_wgmma_dqw("
                       : wgmma             ? "fa_backward_dkdv_wgmma("
                                           : "fa_backward_dkdv(") +
               common + ", " + out(1) + ", " + out(2) +
               (path.fusedDq                                      ? ", " + out(0)
                : wgmma && !path.producer && !rope.empty() ? std::string(", nullptr")  // dq: the dQ pass stores it
                                                                   : std::string()) +
               rope + ");",
           wgmma ? 1 : mma ? tiling.dkdvMinBlocks : 0, kvZs);
  return launches;
}

}  // namespace fusec::codegen
