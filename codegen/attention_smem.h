// The dynamic shared memory of the attention launches, laid out once. The templates
// (attention_simt.cuh, attention_mma.cuh, attention_wgmma.cuh) used to add their arrays up in
// CUDA and the generator again in C++ to size each launch, and nothing checked that the two
// agreed. Now each launch's arrays are listed here in order; the generator sizes the launch
// from the list and writes every array's byte offset as a macro, FA_SMEM_<LAUNCH>_<ARRAY>,
// which is the only place a template finds that array.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fusec::codegen {

class KernelBuilder;

struct SmemLayout {
  struct Array {
    std::string name;
    int64_t offset = 0, bytes = 0;
  };
  std::string launch;       // the macro infix: FWD, DQ, DKDV, WG_FWD, WG_DQ, WG_DKDV
  int64_t baseAlign = 16;  // the template aligns its base up to this (extern __shared__ is 16)
  std::vector<Array> arrays;

  // Appends an array right after the previous one, which must leave it `align`-byte aligned
  // (16: a cp.async or vector row; the wgmma tiles' 1024): a layout that does not is a
  // generator bug, refused here rather than faulting on the device.
  SmemLayout& add(const std::string& name, int64_t bytes, int64_t align = 16);
  // What the launch asks for: the arrays, and the slack an aligned-up base may skip.
  int64_t bytes() const;
};

// The tiles of one attention kernel: head dims, element bytes of the operand tiles, the
// block's own rows (BR), the key tile of the forward and dQ (BC), the query tile of dK/dV
// (BQ), and whether dQ keeps an o tile (mma template, FA_DQ_OTILE).
struct AttentionTiles {
  int64_t d = 0, dv = 0, elementBytes = 2, rows = 64, bc = 64, bq = 64;
  bool dqOTile = false;
  int64_t producerStages = 0;  // > 0: the wgmma forward with a producer warpgroup and this many K and V buffers
  int fusedDq = 0;  // the wgmma dK/dV launch computes dQ too (Target::wgmmaFusedDq): its dS^T tiles; 2: a writer's buffers
  bool shortDs = false;  // the one-launch backward keeps dS^T in shared memory (FA_SHORT_DS)
};

// The three launches (forward, dQ, dK/dV) of each template, in that order; the wgmma
// template's list has two more when t.producerStages > 0: WG_FWS and WG_DKS, the forward and
// dK/dV with a producer warpgroup.
// SIMT: f32 tiles of `rows` rows (the template's BR = BC), padded by 4 floats.
std::vector<SmemLayout> simtSmemLayouts(int64_t d, int64_t dv, int64_t rows);
std::vector<SmemLayout> mmaSmemLayouts(const AttentionTiles& t);  // rows padded by 16 bytes
std::vector<SmemLayout> wgmmaSmemLayouts(const AttentionTiles& t);  // swizzled, 1 KB aligned
// attention_mma.cuh's one-launch backward for short sequences (fa_backward_short, launch
// SHORT), rows padded as the mma tiles are: Q, G (dO), K and V, t.rows rows each, and every
// query row's statistics (RS). With t.shortDs (FA_SHORT_DS) then DS, the lower triangle of
// dS^T: 16-row key strip w keeps the queries from its causal walk's first t.bq-row tile,
// w / (t.bq / 16) t.bq, to t.rows, each row padded by 16 bytes; END marks the end (the
// template checks its own sum against it).
SmemLayout shortBackwardSmemLayout(const AttentionTiles& t);
// attention_mma.cuh fa_forward_short: q, k and v whole (t.rows rows each), rows padded by 16
// bytes.
SmemLayout shortForwardSmemLayout(const AttentionTiles& t);

// `#define FA_SMEM_<launch>_<array> <offset>` for every array of `l`.
void writeSmemMacros(KernelBuilder& w, const SmemLayout& l);

}  // namespace fusec::codegen
