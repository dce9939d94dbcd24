#include "codegen/attention_smem.h"

#include "codegen/body_emitter.h"
#include "ir/error.h"

namespace fusec::codegen {

SmemLayout& SmemLayout::add(const std::string& name, int64_t bytes, int64_t align) {
  const int64_t offset = arrays.empty() ? 0 : arrays.back().offset + arrays.back().bytes;
  if (offset % align != 0)
    throw Error("codegen: attention shared memory: " + launch + "'s array " + name + " would start at byte " +
                std::to_string(offset) + ", not a multiple of " + std::to_string(align));
  arrays.push_back({name, offset, bytes});
  return *this;
}

int64_t SmemLayout::bytes() const {
  const int64_t end = arrays.empty() ? 0 : arrays.back().offset + arrays.back().bytes;
  return end + (baseAlign > 16 ? baseAlign : 0);
}

namespace {
SmemLayout named(std::string launch, int64_t baseAlign = 16) {
  SmemLayout l;
  l.launch = std::move(launch);
  l.baseAlign = baseAlign;
  return l;
}
}  // namespace

// attention_simt.cuh: f32 tiles of BR = BC = `rows` rows, rows padded by 4 floats (PAD), the
// score tile's rows by the same (LDT).
std::vector<SmemLayout> simtSmemLayouts(int64_t d, int64_t dv, int64_t rows) {
  constexpr int64_t kPad = 4, f = 4;
  const int64_t ld = (d + kPad) * f, ldv = (dv + kPad) * f, ldt = (rows + kPad) * f;
  SmemLayout fwd = named("FWD"), dq = named("DQ"), dkdv = named("DKDV");
  fwd.add("Q", rows * ld).add("K", rows * ld).add("V", rows * ldv).add("P", rows * ldt);
  dq.add("Q", rows * ld).add("G", rows * ldv).add("K", rows * ld).add("V", rows * ldv).add("S", rows * ldt);
  dq.add("D", rows * f).add("L2", rows * f);
  dkdv.add("K", rows * ld).add("V", rows * ldv).add("Q", rows * ld).add("G", rows * ldv);
  dkdv.add("P", rows * ldt).add("S", rows * ldt).add("D", rows * f).add("L2", rows * f);
  return {fwd, dq, dkdv};
}

// attention_mma.cuh: operand-dtype tiles whose rows are padded by 16 bytes (ldmatrix reads
// them without bank conflicts); the forward and dQ double-buffer their key tiles, dK/dV its
// query tiles.
std::vector<SmemLayout> mmaSmemLayouts(const AttentionTiles& t) {
  const int64_t es = t.elementBytes, ld = (t.d + 16 / es) * es, ldv = (t.dv + 16 / es) * es;
  const int64_t br = t.rows, bc = t.bc, bq = t.bq;
  SmemLayout fwd = named("FWD"), dq = named("DQ"), dkdv = named("DKDV");
  fwd.add("Q", br * ld).add("K", 2 * bc * ld).add("V", 2 * bc * ldv);
  dq.add("Q", br * ld).add("G", br * ldv);
  if (t.dqOTile) dq.add("O", br * ldv);
  dq.add("K", 2 * bc * ld).add("V", 2 * bc * ldv);
  if (!t.dqOTile) dq.add("D", br * 4).add("L2", br * 4);  // the row statistics, f32
  dkdv.add("K", br * ld).add("V", br * ldv).add("Q", 2 * bq * ld).add("G", 2 * bq * ldv);
  dkdv.add("RS", 2 * bq * 8);  // {D, L2} of each query row of both buffers, float2
  return {fwd, dq, dkdv};
}

SmemLayout shortForwardSmemLayout(const AttentionTiles& t) {
  const int64_t es = t.elementBytes, ld = (t.d + 16 / es) * es, ldv = (t.dv + 16 / es) * es, rows = t.rows;
  SmemLayout l = named("SHORT_FWD");
  l.add("Q", rows * ld).add("K", rows * ld).add("V", rows * ldv);
  return l;
}

SmemLayout shortBackwardSmemLayout(const AttentionTiles& t) {
  const int64_t es = t.elementBytes, ld = (t.d + 16 / es) * es, ldv = (t.dv + 16 / es) * es, rows = t.rows;
  SmemLayout l = named("SHORT");
  l.add("Q", rows * ld).add("G", rows * ldv).add("K", rows * ld).add("V", rows * ldv).add("RS", rows * 8);
  if (t.shortDs) {
    if (t.bq % 16 != 0 || rows % t.bq != 0)
      throw Error("codegen: attention shared memory: dS kept needs whole " + std::to_string(t.bq) + "-row query tiles");
    int64_t ds = 0;
    for (int64_t w = 0; w < rows / 16; ++w) ds += 16 * (rows - w / (t.bq / 16) * t.bq + 16 / es) * es;
    l.add("DS", ds).add("END", 0);
  }
  return l;
}

// attention_wgmma.cuh: unpadded tiles in the 128-byte swizzle, every one on a 1024-byte
// boundary (the swizzle repeats every 8 rows of 128 bytes; the descriptors' base offset is 0),
// after a base the template aligns up to 1 KB.
std::vector<SmemLayout> wgmmaSmemLayouts(const AttentionTiles& t) {
  constexpr int64_t kTile = 1024;
  const int64_t es = t.elementBytes, br = t.rows, bc = t.bc, bq = t.bq;
  SmemLayout fwd = named("WG_FWD", kTile), dq = named("WG_DQ", kTile), dkdv = named("WG_DKDV", kTile);
  fwd.add("Q", br * t.d * es, kTile).add("K", 2 * bc * t.d * es, kTile).add("V", 2 * bc * t.dv * es, kTile);
  dq.add("Q", br * t.d * es, kTile).add("G", br * t.dv * es, kTile);
  dq.add("K", 2 * bc * t.d * es, kTile).add("V", 2 * bc * t.dv * es, kTile);
  dq.add("D", br * 4).add("L2", br * 4);  // the row statistics, f32
  dkdv.add("K", br * t.d * es, kTile).add("V", br * t.dv * es, kTile);
  dkdv.add("Q", 2 * bq * t.d * es, kTile).add("G", 2 * bq * t.dv * es, kTile);
  dkdv.add("RS", 2 * bq * 8);  // {D, L2} of each query row of both buffers, float2
  // One pass (fusedDq): each warpgroup's dS^T (its 64 key rows x bq queries, swizzled), the A
  // operand of its dQ product, read transposed by the tensor cores.
  if (t.fusedDq) dkdv.add("DS", 2 * 64 * bq * es, kTile);
  // With a dQ writer (2): the consumers' dQ halves handed to it, the sums it copies in (both
  // 64 x d f32), and its full and empty mbarriers.
  if (t.fusedDq == 2) dkdv.add("DQ", 64 * t.d * 4).add("DQL", 64 * t.d * 4).add("DQB", 16, 8);
  if (t.producerStages <= 0) return {fwd, dq, dkdv};
  // The producer's ring: `stages` K and V buffers, then their full and empty mbarriers.
  SmemLayout fws = named("WG_FWS", kTile);
  const int64_t s = t.producerStages;
  fws.add("Q", br * t.d * es, kTile).add("K", s * bc * t.d * es, kTile).add("V", s * bc * t.dv * es, kTile);
  fws.add("BAR", 4 * s * 8, 8);
  // dK/dV with a producer: its own K and V rows, the ring of Q, dO and row statistics, and
  // the ring's full and empty mbarriers.
  SmemLayout dks = named("WG_DKS", kTile);
  dks.add("K", br * t.d * es, kTile).add("V", br * t.dv * es, kTile);
  dks.add("Q", s * bq * t.d * es, kTile).add("G", s * bq * t.dv * es, kTile);
  dks.add("RS", s * bq * 8).add("BAR", 2 * s * 8, 8);
  return {fwd, dq, dkdv, fws, dks};
}

void writeSmemMacros(KernelBuilder& w, const SmemLayout& l) {
  for (const auto& a : l.arrays)
    w.define("FA_SMEM_" + l.launch + "_" + a.name, std::to_string(a.offset), std::to_string(a.bytes) + " bytes");
}

}  // namespace fusec::codegen
