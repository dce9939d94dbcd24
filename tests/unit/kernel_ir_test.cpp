// The kernel IR's builder (KernelBuilder) and its two printers (codegen/kernel_ir.h): the CUDA of
// every statement kind, the dump of the same statements, and the builder's refusals.
#include "codegen/kernel_ir.h"

#include <gtest/gtest.h>

#include "codegen/body_emitter.h"
#include "ir/error.h"

namespace fusec::codegen {
namespace {

// A vector loop as the pointwise schedule writes one, with a declaration inserted before the
// lane loop after it was written (as the lane loads' register arrays are).
void buildVectorLoop(KernelBuilder& w) {
  w.open("extern \"C\" __global__ void k(const float* in0, float* out0)");
  w.open(kir::ifThen("aligned"));
  w.comment("4 consecutive elements per thread");
  w.open(kir::gridStrideLoop("v", 8, "blockIdx.x", "gridDim.x"));
  w.let("fusec_idx", "i", "v * 4");
  const KernelBuilder::Mark declarations = w.mark();
  w.line("float s0[4];");
  w.open(kir::laneLoop("j", 4));
  w.vectorLoad(4, "a0", "in0", "(i + j)", "j == 0", "#0 = input() : f32[32]");
  w.let("float", "t1", "a0[j] * 2.0f", "#1 = mul(#0, #0)");
  w.line("s0[j] = t1;");
  w.close();
  std::vector<std::unique_ptr<kir::Stmt>> late;
  late.push_back(std::make_unique<kir::Stmt>(kir::make(kir::StmtKind::Array, "a0", "float", "4")));
  w.insert(declarations, std::move(late));
  w.store("out0", "i", "s0", 4);
  w.close();
  w.close();
  w.open(kir::elseIf(""));
  w.open(kir::gridStrideLoop("i", 32, "blockIdx.x", "gridDim.x"));
  w.load("float", "x2", DType::bf16, "in0", "i", "#0 = input()");
  w.store("out0", "i", "x2");
  w.close();
  w.close();
  w.close();
}

TEST(KernelIr, PrintsEachStatementAsCuda) {
  KernelBuilder w;
  buildVectorLoop(w);
  EXPECT_EQ(w.str(),
            "extern \"C\" __global__ void k(const float* in0, float* out0) {\n"
            "  if (aligned) {\n"
            "    // 4 consecutive elements per thread\n"
            "    for (fusec_idx v = (fusec_idx)(blockIdx.x) * blockDim.x + threadIdx.x; v < 8; v += (fusec_idx)(gridDim.x) * blockDim.x) {\n"
            "      const fusec_idx i = v * 4;\n"
            "      float a0[4];\n"
            "      float s0[4];\n"
            "      #pragma unroll\n"
            "      for (int j = 0; j < 4; ++j) {\n"
            "        if (j == 0) fusec_vload<4>(a0, in0 + (i + j));  // #0 = input() : f32[32]\n"
            "        const float t1 = a0[j] * 2.0f;  // #1 = mul(#0, #0)\n"
            "        s0[j] = t1;\n"
            "      }\n"
            "      fusec_vstore<4>(out0 + i, s0);\n"
            "    }\n"
            "  }\n"
            "  else {\n"
            "    for (fusec_idx i = (fusec_idx)(blockIdx.x) * blockDim.x + threadIdx.x; i < 32; i += (fusec_idx)(gridDim.x) * blockDim.x) {\n"
            "      const float x2 = __bfloat162float(in0[i]);  // #0 = input()\n"
            "      out0[i] = x2;\n"
            "    }\n"
            "  }\n"
            "}\n");
}

TEST(KernelIr, DumpsTheStatements) {
  KernelBuilder w;
  buildVectorLoop(w);
  EXPECT_EQ(w.kir(),
            "block extern \"C\" __global__ void k(const float* in0, float* out0)\n"
            "  if aligned\n"
            "    // 4 consecutive elements per thread\n"
            "    loop v grid-stride [0, 8) from block blockIdx.x over gridDim.x\n"
            "      let i: fusec_idx = v * 4\n"
            "      array a0: float[4]\n"
            "      text float s0[4];\n"
            "      loop j lanes [0, 4)\n"
            "        load.v4 a0 = in0[(i + j)] when j == 0  // #0 = input() : f32[32]\n"
            "        let t1: float = a0[j] * 2.0f  // #1 = mul(#0, #0)\n"
            "        text s0[j] = t1;\n"
            "      store.v4 out0[i] = s0\n"
            "  else\n"
            "    loop i grid-stride [0, 32) from block blockIdx.x over gridDim.x\n"
            "      load x2: float = in0[i] (bf16)  // #0 = input()\n"
            "      store out0[i] = x2\n");
}

// A column tile's pass as the reduction schedule writes one: a strided loop with its guard and
// unroll, a counted loop, an accumulator and its steps, and a reduce of each scope.
TEST(KernelIr, ReductionsAndTheirScopes) {
  KernelBuilder w;
  w.var("float", "acc0", "0.0f");
  w.open(kir::stridedLoop("inner", "lane", "24", "8", "live", 4));
  w.open(kir::countedLoop("c", 2, -1));
  w.accumulate("acc0", "fusec_sum", "(float)x1");
  w.close();
  w.close();
  w.reduce("float", "red2", kir::ReduceScope::ColumnTile, "fusec_sum", "acc0");
  w.reduce("float", "red3", kir::ReduceScope::Warp, "fusec_max", "acc0");
  w.reduce("float", "red4", kir::ReduceScope::WarpGroup, "fusec_sum", "acc0", 128, "24.0f");
  w.reduce("float", "red5", kir::ReduceScope::Thread, "fusec_sum", "acc0", 1, "24.0f");
  EXPECT_EQ(w.str(),
            "float acc0 = 0.0f;\n"
            "#pragma unroll 4\n"
            "for (fusec_idx inner = lane; live && inner < 24; inner += 8) {\n"
            "  #pragma unroll\n"
            "  for (int c = 0; c < 2; ++c) {\n"
            "    acc0 = fusec_sum()(acc0, (float)x1);\n"
            "  }\n"
            "}\n"
            "const float red2 = fusec_col_reduce(acc0, fusec_sum());\n"
            "const float red3 = fusec_warp_reduce(acc0, fusec_max());\n"
            "const float red4 = (fusec_group_total<128>(fusec_part_acc0, fusec_sum())) / 24.0f;\n"
            "const float red5 = (acc0) / 24.0f;\n");
  EXPECT_EQ(w.kir(),
            "var acc0: float = 0.0f\n"
            "loop inner from lane below 24 by 8 while live unroll 4\n"
            "  loop c [0, 2) unrolled\n"
            "    accumulate acc0 = fusec_sum(acc0, (float)x1)\n"
            "reduce.column-tile red2: float = fusec_sum(acc0)\n"
            "reduce.warp red3: float = fusec_max(acc0)\n"
            "reduce.warp-group<128> red4: float = fusec_sum(acc0) / 24.0f\n"
            "reduce.thread red5: float = fusec_sum(acc0) / 24.0f\n");
}

TEST(KernelIr, RegisterArraysAndTheirElements) {
  KernelBuilder w;
  w.array("float", "s0", "4", "#2 = exp(#1)");
  w.array("unsigned", "r1", "2");
  w.assign("s0[j]", "t3");
  EXPECT_EQ(w.str(), "float s0[4];  // #2 = exp(#1)\nunsigned r1[2];\ns0[j] = t3;\n");
  EXPECT_EQ(w.kir(), "array s0: float[4]  // #2 = exp(#1)\narray r1: unsigned[2]\nassign s0[j] = t3\n");
}

// A one-line loop or branch prints its statement on the header's line (nested: a branch in a
// loop), with the loop's pragma before it; the dump nests them as any scope.
TEST(KernelIr, OneLineScopesPrintTheirStatementOnTheHeadersLine) {
  KernelBuilder w;
  w.openOneLine(kir::countedLoopFrom("b", "1", "4", -1));
  w.openOneLine(kir::ifThen("first + b < end"));
  w.accumulate("a", "fusec_max", "v[b]");
  w.close();
  w.close();
  w.openOneLine(kir::countedLoop("g", 8, 0));
  w.accumulate("at", "+", "hits[g]");
  w.close();
  EXPECT_EQ(w.str(),
            "#pragma unroll\nfor (int b = 1; b < 4; ++b) if (first + b < end) a = fusec_max()(a, v[b]);\n"
            "for (int g = 0; g < 8; ++g) at += hits[g];\n");
  EXPECT_EQ(w.kir(),
            "loop b [1, 4) unrolled\n  if first + b < end\n    accumulate a = fusec_max(a, v[b])\n"
            "loop g [0, 8)\n  accumulate at += hits[g]\n");
}

TEST(KernelIr, AOneLineScopeHoldsExactlyOneStatement) {
  KernelBuilder none;
  none.openOneLine(kir::ifThen("lane == 0"));
  EXPECT_THROW(none.close(), Error);
  KernelBuilder two;
  two.openOneLine(kir::ifThen("lane == 0"));
  two.assign("a", "1");
  two.assign("b", "2");
  EXPECT_THROW(two.close(), Error);
  KernelBuilder text;  // a statement of two lines is not one line either
  text.openOneLine(kir::ifThen("lane == 0"));
  text.line("a = 1;\nb = 2;");
  text.close();
  EXPECT_THROW(text.str(), Error);
}

TEST(KernelIr, BarriersOfABlockAWarpAndAGroupOfWarps) {
  KernelBuilder w;
  w.barrier();
  w.barrier(kir::SyncScope::Warp, "the lanes' writes");
  w.groupBarrier(128, 256, "the parts are written");
  EXPECT_EQ(w.str(), "__syncthreads();\n__syncwarp();  // the lanes' writes\n"
                     "fusec_group_sync<128, 256>();  // the parts are written\n");
  EXPECT_EQ(w.kir(), "barrier.block\nbarrier.warp  // the lanes' writes\n"
                     "barrier.warp-group<128> of 256  // the parts are written\n");
}

TEST(KernelIr, AVarCarriesItsNote) {
  KernelBuilder w;
  w.var("int", "listed", "0", "the same in every thread");
  w.var("float", "a", "0.0f");
  EXPECT_EQ(w.str(), "int listed = 0;  // the same in every thread\nfloat a = 0.0f;\n");
  EXPECT_EQ(w.kir(), "var listed: int = 0  // the same in every thread\nvar a: float = 0.0f\n");
}

TEST(KernelIr, DefinesAreATemplatesParameters) {
  KernelBuilder w;
  w.define("FA_BC", "64");
  w.define("FA_GROUP", "4", "query heads a key/value head");
  EXPECT_EQ(w.str(), "#define FA_BC 64\n#define FA_GROUP 4  // query heads a key/value head\n");
  EXPECT_EQ(w.kir(), "define FA_BC = 64\ndefine FA_GROUP = 4  // query heads a key/value head\n");
}

TEST(KernelIr, TextKeepsItsLinesAndBlocksTheirClosingLine) {
  KernelBuilder w;
  w.line("__device__ int f() {\n  return 1;\n}");
  w.open("struct S");
  w.line("int x;");
  w.close("};");
  EXPECT_EQ(w.str(), "__device__ int f() {\n  return 1;\n}\nstruct S {\n  int x;\n};\n");
  EXPECT_EQ(w.kir(), "text __device__ int f() { ... (3 lines)\nblock struct S\n  text int x;\n");
}

TEST(KernelIr, RefusesToCloseWhatIsNotOpenOrToInsertIntoAClosedScope) {
  KernelBuilder w;
  EXPECT_THROW(w.close(), Error);
  w.open("{ // a");
  const KernelBuilder::Mark inside = w.mark();
  w.close();
  std::vector<std::unique_ptr<kir::Stmt>> late;
  late.push_back(std::make_unique<kir::Stmt>(kir::make(kir::StmtKind::Text, "int late;")));
  EXPECT_THROW(w.insert(inside, std::move(late)), Error);
}

}  // namespace
}  // namespace fusec::codegen
