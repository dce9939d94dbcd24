// codegen/: kernel source generation, NVRTC and the cubin cache. No GPU: these tests check
// that sources are generated for every kernel the pipeline builds and that NVRTC compiles
// them (skipped, with the reason, where fusec was built without NVRTC).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <set>

#include "codegen/cubin_cache.h"
#include "codegen/family_emitters.h"
#include "codegen/helpers.h"
#include "codegen/generate.h"
#include "codegen/nvrtc_compiler.h"
#include "codegen/scalar_ops.h"
#include "codegen/target.h"
#include "frontend/models/attention.h"
#include "frontend/models/transformer.h"
#include "ir/parser.h"
#include "ir/philox.h"
#include "ir/printer.h"
#include "passes/pass_manager.h"
#include "api/compile.h"
#include "passes/pipeline.h"
#include "test_util.h"

namespace fusec {
namespace {

using namespace codegen;

#define SKIP_WITHOUT_NVRTC() \
  if (!nvrtcAvailable()) GTEST_SKIP() << "fusec was built without NVRTC (CUDA toolkit not found at configure time)"

// A fresh cache directory per test.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& name) {
    path = (std::filesystem::temp_directory_path() / ("fusec_codegen_test_" + name + "_" + std::to_string(::getpid()))).string();
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

std::unique_ptr<Module> compiled(const std::string& model, const std::string& program, DType dt, int64_t batch,
                                 int64_t ctx, AttentionLowering attention = AttentionLowering::Default) {
  auto m = std::make_unique<Module>();
  models::ModelConfig cfg = models::namedConfig(model);
  if (program == "forward") models::buildForward(*m, cfg, batch, ctx);
  else models::buildTrainLoss(*m, cfg, batch, ctx);
  api::lowerProgram(*m, program, {.dtype = dt, .attention = attention});
  return m;
}

// The source with its image's name replaced (generateModule already shares sources within
// one module; this dedupes across models).
std::string withoutName(const GeneratedKernel& k) {
  std::string s = k.source;
  for (size_t p; (p = s.find(k.image)) != std::string::npos;) s.replace(p, k.image.size(), "fusec_kernel");
  return s;
}

TEST(CodegenTest, ScalarFormulasComeFromTheOpTable) {
  EXPECT_EQ(scalarFormula(OpKind::Add, {"x", "y"}), "((x) + (y))");
  // Only the operand identifiers are replaced, not the `a` inside a function name.
  EXPECT_EQ(scalarFormula(OpKind::Rsqrt, {"v"}), "(1 / sqrt((v)))");
  EXPECT_EQ(scalarFormula(OpKind::Select, {"p", "q", "r"}), "((p) ? (q) : (r))");
  EXPECT_NE(test::errorOf([] { scalarFormula(OpKind::Sum, {"x"}); }).find("no scalar formula"), std::string::npos);
}

// bf16/f16 results take the hardware approximations; f32 results and ops without a fast
// form keep the op table's formula.
TEST(CodegenTest, LowPrecisionResultsUseFastFormulas) {
  EXPECT_EQ(scalarFormula(OpKind::Sigmoid, {"x"}, true), "__fdividef(1.0f, 1.0f + __expf(-(x)))");
  EXPECT_EQ(scalarFormula(OpKind::Div, {"x", "y"}, true), "__fdividef((x), (y))");
  EXPECT_EQ(scalarFormula(OpKind::Sigmoid, {"x"}, false), "(1 / (1 + exp(-(x))))");
  EXPECT_EQ(scalarFormula(OpKind::Add, {"x", "y"}, true), scalarFormula(OpKind::Add, {"x", "y"}));
}

TEST(CodegenTest, KernelNamesAreCIdentifiers) {
  EXPECT_EQ(sanitizeKernelName("row_reduce_3_rmsnorm"), "row_reduce_3_rmsnorm");
  EXPECT_EQ(sanitizeKernelName("a.b-c"), "a_b_c");
  EXPECT_EQ(sanitizeKernelName("3x"), "k_3x");
}

TEST(CodegenTest, EveryTinyKernelHasLaunchesAndTypedParameters) {
  for (DType dt : {DType::f32, DType::bf16}) {
    auto m = compiled("tiny", "train_step", dt, 2, 8);
    auto kernels = generateModule(*m);
    ASSERT_FALSE(kernels.empty());
    std::set<KernelFamily> families;
    for (const auto& k : kernels) {
      families.insert(k.family);
      ASSERT_FALSE(k.launches.empty()) << k.name;
      EXPECT_EQ(k.launches.back().function, k.image);
      for (const auto& l : k.launches) {
        EXPECT_GT(l.grid[0], 0u) << k.name;
        EXPECT_GT(l.block[0], 0u) << k.name;
        // The block size, and optionally the blocks per SM asked of ptxas.
        const std::string head = "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(l.block[0]);
        EXPECT_TRUE(k.source.find(head + ") " + l.function + "(") != std::string::npos ||
                    (k.source.find(head + ", 2) " + l.function + "(") != std::string::npos &&
                     (k.family == KernelFamily::RowReduce || k.family == KernelFamily::Scatter)))
            << k.name;
      }
      if (dt == DType::bf16 && k.family == KernelFamily::RowReduce) {
        EXPECT_NE(k.source.find("float acc"), std::string::npos) << "f32 accumulators: " << k.name;
      }
    }
    // A training step has all of these. Its column sums (the norm-weight gradients) are part
    // of the rmsnorm backward's row kernels, and its loss (the mean of the per-row losses) a
    // total of the cross-entropy row kernel, so it has no col_reduce or reduce_all kernel.
    for (KernelFamily f : {KernelFamily::Pointwise, KernelFamily::RowReduce, KernelFamily::Scatter,
                           KernelFamily::MultiTensor})
      EXPECT_TRUE(families.count(f)) << familyName(f);
    EXPECT_FALSE(families.count(KernelFamily::ColReduce));
    EXPECT_FALSE(families.count(KernelFamily::ReduceAll));
  }
}

// Device facts come from the Target: grids that fill the GPU follow its multiprocessors and
// thread slots, a launch that needs more shared memory than a block may have is refused here
// (not when the step runs), and NVRTC compiles for the target's architecture.
// The target switches read from the environment take exactly their values; anything else is
// one error naming the variable rather than the default in silence.
TEST(CodegenTest, TargetSwitchesFromTheEnvironmentAreChecked) {
  {
    test::ScopedEnv dq("FUSEC_WGMMA_FUSED_DQ", "2"), rows("FUSEC_ROW_SHARED", "0"), wg("FUSEC_WGMMA", "0"),
        minSeq("FUSEC_WGMMA_BWD_MIN_SEQ", "256"), shortMax("FUSEC_SHORT_BWD_MAX_SEQ", "0"),
        fwdMinSeq("FUSEC_WGMMA_FWD_MIN_SEQ", "512"), ds("FUSEC_SHORT_BWD_DS", "0"),
        shortFwd("FUSEC_SHORT_FWD_MAX_SEQ", "0"), shortFwdHeads("FUSEC_SHORT_FWD_MIN_HEADS_PER_SM", "0");
    const Target t = offlineTarget();
    EXPECT_EQ(t.shortForwardMaxSeq, 0);
    EXPECT_EQ(t.shortForwardMinHeadsPerSm, 0);
    EXPECT_EQ(t.wgmmaFusedDq, 2);
    EXPECT_EQ(t.wgmmaBackwardMinSeq, 256);
    EXPECT_EQ(t.wgmmaForwardMinSeq, 512);
    EXPECT_FALSE(t.shortBackwardDs);
    EXPECT_EQ(t.shortBackwardMaxSeq, 0);
    EXPECT_FALSE(t.rowShared);
    EXPECT_FALSE(t.wgmma);
  }
  const Target defaults = offlineTarget();
  EXPECT_EQ(defaults.wgmmaFusedDq, 0);
  EXPECT_TRUE(defaults.rowShared);
  EXPECT_EQ(defaults.wgmmaBackwardMinSeq, 1024);
  EXPECT_EQ(defaults.shortBackwardMaxSeq, 256);
  EXPECT_TRUE(defaults.shortBackwardDs);
  EXPECT_EQ(defaults.wgmmaForwardMinSeq, 0);
  EXPECT_EQ(defaults.shortForwardMaxSeq, 256);
  EXPECT_EQ(defaults.shortForwardMinHeadsPerSm, 2);
  const std::pair<const char*, const char*> bad[] = {{"FUSEC_WGMMA_FUSED_DQ", "3"}, {"FUSEC_WGMMA_FUSED_DQ", "1 "},
                                                     {"FUSEC_ROW_SHARED", "yes"}, {"FUSEC_WGMMA", "2"},
                                                     {"FUSEC_WGMMA_PRODUCER", " "}, {"FUSEC_WGMMA_BWD_MIN_SEQ", "-1"},
                                                     {"FUSEC_WGMMA_BWD_MIN_SEQ", "1e3"},
                                                     {"FUSEC_WGMMA_BWD_MIN_SEQ", "99999999999"},
                                                     {"FUSEC_WGMMA_BWD_MIN_SEQ", "2147483649"},
                                                     {"FUSEC_SHORT_BWD_MAX_SEQ", "256k"}, {"FUSEC_SHORT_BWD_DS", "on"},
                                                     {"FUSEC_WGMMA_FWD_MIN_SEQ", "x"},
                                                     {"FUSEC_SHORT_FWD_MAX_SEQ", "1k"},
                                                     {"FUSEC_SHORT_FWD_MIN_HEADS_PER_SM", "65536"}};
  for (const auto& [name, value] : bad) {
    test::ScopedEnv scoped(name, value);
    try {
      offlineTarget();
      ADD_FAILURE() << name << "='" << value << "' was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
  // Set but empty is the default, as unset (support/env.h: `NAME=` clears a setting).
  test::ScopedEnv producer("FUSEC_WGMMA_PRODUCER", ""), minSeq("FUSEC_WGMMA_BWD_MIN_SEQ", "");
  const Target cleared = offlineTarget();
  EXPECT_EQ(cleared.wgmmaProducer, defaults.wgmmaProducer);
  EXPECT_EQ(cleared.wgmmaBackwardMinSeq, defaults.wgmmaBackwardMinSeq);
}

TEST(CodegenTest, GridsAndLimitsFollowTheTarget) {
  auto m = compiled("tiny", "train_step", DType::bf16, 2, 8, AttentionLowering::Fused);
  Target h100;
  EXPECT_EQ(h100.arch(), "sm_90a");
  EXPECT_EQ(NvrtcOptions().arch, "sm_90a");
  Target plain = h100;
  plain.wgmma = false;
  EXPECT_EQ(plain.arch(), "sm_90");
  Target ampere = h100;  // the flag alone does not make an sm_80a
  ampere.major = 8;
  EXPECT_FALSE(ampere.hasWgmma());
  EXPECT_EQ(ampere.arch(), "sm_80");
  Target small = h100;
  small.sms = 4;
  small.threadsPerSm = 1024;
  EXPECT_EQ(elementGrid(int64_t(1) << 30, h100), uint32_t(132 * 2048 / kBlock));
  EXPECT_EQ(elementGrid(int64_t(1) << 30, small), uint32_t(4 * 1024 / kBlock));
  EXPECT_EQ(elementGrid(100, small), 1u);
  Target tight = h100;
  tight.smemPerBlock = 4096;
  std::string what;
  try {
    generateModule(*m, tight);
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("bytes of shared memory a block; sm_90a allows 4096"), std::string::npos) << what;
  EXPECT_NO_THROW(generateModule(*m, h100));
}

// Where the column sums' accumulators go is the target's to say: row-reduce.fir's wide rows
// keep them in shared memory on a Hopper (48 KB of static shared memory a block), and in
// registers on a target that allows a block less than they need.
TEST(CodegenTest, ColumnSumsInSharedMemoryOnlyWhereTheTargetHasRoom) {
  std::ifstream in(std::string(FUSEC_SOURCE_DIR) + "/tests/lit/codegen/row-reduce.fir");
  std::stringstream text;
  text << in.rdbuf();
  auto m = parseModule(text.str(), "row-reduce.fir");
  PassManager pm;
  pm.addPipeline("fuse");
  pm.run(*m);
  auto sharedAccumulators = [&](const Target& t) {
    int n = 0;
    for (const auto& k : generateModule(*m, t)) n += k.source.find("__shared__ float fusec_cs_acc[") != std::string::npos;
    return n;
  };
  Target hopper;
  EXPECT_GT(sharedAccumulators(hopper), 0);
  Target small = hopper;
  small.smemStaticPerBlock = 16 * 1024;  // 8 KB for the accumulators: row-reduce.fir's need 16
  EXPECT_EQ(sharedAccumulators(small), 0);
}

// A helper's definition is in exactly the sources that call it (codegen/helpers.h).
TEST(CodegenTest, SourcesDefineTheHelpersTheyCallAndNoOthers) {
  int withVectors = 0, without = 0;
  for (DType dt : {DType::f32, DType::bf16})
    for (const auto& k : generateModule(*compiled("tiny", "train_step", dt, 2, 8))) {
      const bool calls = k.source.find("fusec_vload<") != std::string::npos || k.source.find("fusec_vstore<") != std::string::npos ||
                         k.source.find("fusec_vload_packed<") != std::string::npos;
      const bool defines = k.source.find(helperSource(Helper::VectorIO)) != std::string::npos;
      EXPECT_EQ(calls, defines) << k.name;
      EXPECT_EQ(k.source.find(helperSource(Helper::Philox)), std::string::npos) << k.name;
      (calls ? withVectors : without) += 1;
    }
  EXPECT_GT(withVectors, 0);
  EXPECT_GT(without, 0);
}

TEST(CodegenTest, LayersShareOneImage) {
  auto m = compiled("tiny", "forward", DType::f32, 2, 8);
  auto kernels = generateModule(*m);
  std::set<std::string> images;
  for (const auto& k : kernels) {
    images.insert(k.image);
    if (k.image != k.name) {
      auto first = std::find_if(kernels.begin(), kernels.end(), [&](auto& o) { return o.name == k.image; });
      ASSERT_NE(first, kernels.end());
      EXPECT_EQ(first->source, k.source);
      EXPECT_EQ(withoutName(*first), withoutName(k));
    }
  }
  EXPECT_LT(images.size(), kernels.size()) << "tiny has two layers with identical kernels";
}

TEST(CodegenTest, InPlaceUpdatesDropRestrict) {
  auto m = compiled("tiny", "train_step", DType::f32, 2, 8);
  int withAliases = 0;
  for (const auto& k : generateModule(*m)) {
    if (k.aliases.empty()) continue;
    ++withAliases;
    auto [o, r] = k.aliases.front();
    EXPECT_NE(k.source.find("* in" + std::to_string(o) + ","), std::string::npos) << k.name;
    EXPECT_EQ(k.source.find("__restrict__ in" + std::to_string(o) + ","), std::string::npos) << k.name;
    EXPECT_EQ(k.source.find("__restrict__ out" + std::to_string(r) + ")"), std::string::npos) << k.name;
    EXPECT_EQ(k.source.find("__restrict__ out" + std::to_string(r) + ","), std::string::npos) << k.name;
  }
  EXPECT_GT(withAliases, 0) << "AdamW updates params in place";
}

// The fast paths are in the sources of real training steps: 16-byte vectors in
// the element-wise families, the row in registers for row reductions, and a scatter_add
// that adds without atomics (deterministic).
TEST(CodegenTest, TrainStepKernelsUseVectorsRegistersAndNoAtomics) {
  for (const std::string model : {"tiny", "small"})
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(model + " " + std::string(dtypeName(dt)));
      auto m = compiled(model, "train_step", dt, 2, 16);
      std::map<KernelFamily, int> vectorised, total;
      int rowsInRegisters = 0, packedRows = 0;
      for (const auto& k : generateModule(*m)) {
        ++total[k.family];
        const bool vec = k.source.find("fusec_vload<") != std::string::npos ||
                         k.source.find("fusec_vstore<") != std::string::npos;
        if (vec) {
          ++vectorised[k.family];
          // Never without the alignment test and the scalar path beside it.
          EXPECT_NE(k.source.find("& 15ULL) == 0"), std::string::npos) << k.name;
        }
        if (k.family == KernelFamily::RowReduce && k.source.find("// the row in registers") != std::string::npos) {
          ++rowsInRegisters;
          // f32 rows as floats, bf16 ones as packed pairs.
          EXPECT_TRUE(k.source.find("float r0[") != std::string::npos ||
                      k.source.find("unsigned r0[") != std::string::npos)
              << k.name;
          packedRows += k.source.find("unsigned r") != std::string::npos;
        }
        if (k.family == KernelFamily::Scatter) {
          // The only atomic counts a row's positions in shared memory (a count is the same
          // whatever the order); nothing is added to memory by atomics.
          size_t atomics = 0, counts = 0;
          for (size_t at = k.source.find("atomic"); at != std::string::npos; at = k.source.find("atomic", at + 1)) {
            ++atomics;
            counts += k.source.compare(at, 20, "atomicAdd(&cursor[lo") == 0;
          }
          EXPECT_EQ(atomics, counts) << k.name;
          EXPECT_NE(k.source.find("__ballot_sync"), std::string::npos) << k.name;
          EXPECT_EQ(k.launches.size(), 1u) << k.name;
        }
      }
      EXPECT_EQ(vectorised[KernelFamily::MultiTensor], total[KernelFamily::MultiTensor]);
      EXPECT_GT(vectorised[KernelFamily::Pointwise], 0);
      // All but the first rmsnorm, which reads its rows through the embedding gather.
      EXPECT_EQ(rowsInRegisters, total[KernelFamily::RowReduce] - 1);
      // bf16 programs' norms and softmaxes read bf16 rows (a row whose length 8 does not
      // divide, tiny's cross-entropy over 37 logits, stays f32 element by element).
      if (dt == DType::bf16) EXPECT_GT(packedRows, 0);
      else EXPECT_EQ(packedRows, 0);
      EXPECT_GT(total[KernelFamily::Scatter], 0);
    }
}

// Vector width per dtype: 4 floats or 8 bf16 in 16 bytes; mixed f32/bf16 takes 8 (two float4).
TEST(CodegenTest, VectorWidthFillsSixteenBytes) {
  auto kernels = [](const std::string& text) {
    auto mod = parseModule(text, "test.fir");
    PassManager pm;
    pm.addPipeline("fuse");
    pm.run(*mod);
    return generateModule(*mod);
  };
  auto f32 = kernels("func @f {\n %x = input() {name = \"x\"} : f32[4,8]\n %y = exp(%x) : f32[4,8]\n return %y\n}\n");
  ASSERT_EQ(f32.size(), 1u);
  EXPECT_NE(f32[0].source.find("if (j == 0) fusec_vload<4>(a0, in0 + (o_0 * 8 + o_1 + j));"), std::string::npos)
      << f32[0].source;
  EXPECT_NE(f32[0].source.find("const int vo1[4] = {0, 1, 2, 3};"), std::string::npos) << f32[0].source;
  EXPECT_EQ(f32[0].launches[0].grid[0], 1u);
  auto bf16 = kernels("func @f {\n %x = input() {name = \"x\"} : bf16[4,8]\n %y = exp(%x) : bf16[4,8]\n return %y\n}\n");
  EXPECT_NE(bf16[0].source.find("if (j == 0) fusec_vload<8>(a0, in0 + (o_0 * 8 + o_1 + j));"), std::string::npos)
      << bf16[0].source;
  EXPECT_NE(bf16[0].source.find("fusec_vstore<8>(out0 + i, s0);"), std::string::npos);
  // An innermost extent the width does not divide: scalar only.
  auto odd = kernels("func @f {\n %x = input() {name = \"x\"} : f32[4,7]\n %y = exp(%x) : f32[4,7]\n return %y\n}\n");
  EXPECT_EQ(odd[0].source.find("fusec_v"), std::string::npos) << odd[0].source;
  // A weight broadcast over the rows is read along the row: a vector load too
  // (codegen/lanes.h), at the row's position in the weight.
  auto bc = kernels(
      "func @f {\n %x = input() {name = \"x\"} : f32[4,8]\n %w = input() {name = \"w\"} : f32[8]\n"
      " %wb = broadcast(%w) : f32[4,8]\n %y = mul(%x, %wb) : f32[4,8]\n return %y\n}\n");
  EXPECT_NE(bc[0].source.find("fusec_vload<4>(a0, in0 + (o_0 * 8 + o_1 + j));"), std::string::npos) << bc[0].source;
  EXPECT_NE(bc[0].source.find("fusec_vload<4>(a2, in1 + (o_1 + j));"), std::string::npos) << bc[0].source;
}

TEST(CodegenTest, CompileErrorIsOneLineWithTheLogAttached) {
  SKIP_WITHOUT_NVRTC();
  try {
    compileCubin("extern \"C\" __global__ void k() { undeclared_thing = 1; }", "broken");
    FAIL() << "expected a compile error";
  } catch (const CompileError& e) {
    std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_NE(what.find("kernel 'broken' does not compile"), std::string::npos) << what;
    EXPECT_NE(e.log().find("undeclared_thing"), std::string::npos) << e.log();
  }
}

TEST(CubinCacheTest, KeyDependsOnEveryField) {
  const std::string k = CubinCache::key("src", "opts", "13.0", "sm_90");
  EXPECT_EQ(k.size(), 32u);
  EXPECT_EQ(k, CubinCache::key("src", "opts", "13.0", "sm_90"));
  EXPECT_NE(k, CubinCache::key("src2", "opts", "13.0", "sm_90"));
  EXPECT_NE(k, CubinCache::key("src", "opts2", "13.0", "sm_90"));
  EXPECT_NE(k, CubinCache::key("src", "opts", "13.1", "sm_90"));
  EXPECT_NE(k, CubinCache::key("src", "opts", "13.0", "sm_100"));
  EXPECT_NE(CubinCache::key("ab", "c", "", ""), CubinCache::key("a", "bc", "", ""));
}

TEST(CubinCacheTest, RoundTripAndCorruptionIsAMissWithItsReason) {
  TempDir dir("roundtrip");
  CubinCache cache(dir.path);
  const Bytes data = {1, 2, 3, 4, 5, 250, 0, 7};
  const std::string stamp = CubinCache::stamp("13.0", "sm_90");
  EXPECT_EQ(stamp, std::string("fusec ") + FUSEC_VERSION + ", nvrtc 13.0, sm_90");
  CacheLookup absent = cache.load("k1", stamp);
  EXPECT_FALSE(absent.cubin);
  EXPECT_EQ(absent.problem, "");  // absent is a plain miss, not a problem
  cache.store("k1", stamp, data);
  ASSERT_TRUE(cache.load("k1", stamp).cubin);
  EXPECT_EQ(*cache.load("k1", stamp).cubin, data);
  // No temporary file is left behind.
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);

  const std::string path = cache.pathOf("k1");
  auto problem = [&](auto edit) {
    cache.store("k1", stamp, data);
    edit();
    CacheLookup l = cache.load("k1", stamp);
    EXPECT_FALSE(l.cubin);
    return l.problem;
  };
  auto patch = [&](std::streamoff at, std::ios::seekdir from, const std::string& bytes) {
    return [=] {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(at, from);
      f.write(bytes.data(), std::streamsize(bytes.size()));
    };
  };
  EXPECT_EQ(problem(patch(-2, std::ios::end, "c")), "checksum mismatch");  // a flipped payload byte
  EXPECT_EQ(problem(patch(0, std::ios::beg, "X")), "not a fusec cache entry");
  EXPECT_EQ(problem(patch(0, std::ios::beg, "FUSECBN1")), "stale: an older entry format");
  EXPECT_EQ(problem([&] { std::filesystem::resize_file(path, std::filesystem::file_size(path) - 3); }), "truncated");
  EXPECT_EQ(problem([&] { std::filesystem::resize_file(path, 10); }), "truncated header");
  EXPECT_EQ(problem([&] { std::ofstream(path, std::ios::app | std::ios::binary) << "junk"; }), "trailing bytes");
  // Built by another NVRTC: whole, but stale.
  cache.store("k1", CubinCache::stamp("12.8", "sm_90"), data);
  EXPECT_EQ(cache.load("k1", stamp).problem,
            "stale: built by fusec " FUSEC_VERSION ", nvrtc 12.8, sm_90, not fusec " FUSEC_VERSION ", nvrtc 13.0, sm_90");
}

TEST(CubinCacheTest, CorruptEntryIsRebuiltByTheCompiler) {
  SKIP_WITHOUT_NVRTC();
  TempDir dir("rebuild");
  CubinCache cache(dir.path);
  std::vector<CompileJob> jobs = {{"k", "extern \"C\" __global__ void k(float* __restrict__ out0) { out0[0] = 1.0f; }"}};
  CompileStats st;
  auto cold = compileCubins(jobs, &cache, 1, {}, &st);
  EXPECT_EQ(st.compiled, 1);
  auto warm = compileCubins(jobs, &cache, 1, {}, &st);
  EXPECT_EQ(st.cached, 1);
  EXPECT_EQ(cold, warm);
  // Damage the one entry: the next compile notices, recompiles and rewrites it.
  std::string path;
  for (auto& e : std::filesystem::directory_iterator(dir.path)) path = e.path().string();
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put(char(0x5a));
    f.put(char(0xa5));
  }
  testing::internal::CaptureStderr();
  auto again = compileCubins(jobs, &cache, 1, {}, &st);
  const std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_EQ(st.compiled, 1);
  EXPECT_EQ(again, cold);
  EXPECT_EQ(warning, "fusec: warning: kernel cache entry " + path + " (kernel k): checksum mismatch; rebuilt\n");
  compileCubins(jobs, &cache, 1, {}, &st);
  EXPECT_EQ(st.cached, 1);
}

// Four fusec processes compile the same kernels into one empty cache at once (each key is
// written by several of them): every process succeeds with the same cubins, none warns (its
// progress lines aside), and the cache ends with one whole entry per kernel and no temporaries.
TEST(CubinCacheTest, ParallelProcessesShareOneCache) {
  SKIP_WITHOUT_NVRTC();
  TempDir dir("parallel");
  std::filesystem::create_directories(dir.path);
  const int n = 4;
  std::string cmd;
  for (int p = 0; p < n; ++p) {
    const std::string i = std::to_string(p);
    cmd += "(XDG_CACHE_HOME=" + dir.path + "/xdg " FUSEC_BINARY " compile --model toy --program train_step --emit cubin"
           " --out-dir " + dir.path + "/out" + i + " >" + dir.path + "/log" + i + " 2>&1; echo $? >" + dir.path +
           "/rc" + i + ") & ";
  }
  ASSERT_EQ(std::system((cmd + "wait").c_str()), 0);
  auto slurp = [](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  std::map<std::string, std::string> first;
  for (auto& e : std::filesystem::directory_iterator(dir.path + "/out0")) first[e.path().filename()] = slurp(e.path());
  EXPECT_GE(first.size(), 3u);
  for (int p = 0; p < n; ++p) {
    const std::string i = std::to_string(p);
    EXPECT_EQ(slurp(dir.path + "/rc" + i), "0\n") << slurp(dir.path + "/log" + i);
    // No warning: the log holds at most the progress of a compile slow enough to show it
    // (support/progress.h; under ASan on two cores it is).
    std::istringstream log(slurp(dir.path + "/log" + i));
    for (std::string line; std::getline(log, line);)
      EXPECT_TRUE(line.starts_with("[") && line.find("] NVRTC: kernels compiled or cached") != std::string::npos) << line;
    for (auto& [name, bytes] : first) EXPECT_EQ(slurp(dir.path + "/out" + i + "/" + name), bytes) << name;
  }
  CubinCache cache(dir.path + "/xdg/fusec");
  const std::string stamp = CubinCache::stamp(nvrtcVersion(), Target().arch());
  int entries = 0;
  for (auto& e : std::filesystem::directory_iterator(cache.dir())) {
    const std::string name = e.path().filename();
    ASSERT_EQ(e.path().extension(), ".cubin") << name;  // no temporary left
    EXPECT_TRUE(cache.load(e.path().stem(), stamp).cubin) << name;
    ++entries;
  }
  EXPECT_EQ(entries, int(first.size()) - 1);  // every cubin of out0 but kernels.json
}

// Every kernel of every model size, both programs, both dtypes, compiles to a sm_90 cubin,
// with attention lowered naive (the CPU default) and fused (the GPU default: the flash kernels
// on tensor cores, 3xTF32 in f32 and bf16 mma in bf16; their train steps hold forward and
// backward).
// Identical sources (layers) compile once; the cache (the user's, so reruns are warm) and
// the thread pool keep this to minutes on a cold 2-core machine.
// Dropout (a residual add after it, as a model has): decomposed and fused, its kernel calls
// fusec_uniform, carries the interpreter's Philox (ir/philox.h) as CUDA, and NVRTC compiles
// it, f32 and bf16.
TEST(CodegenTest, DropoutKernelsCarryTheirRandomNumbersAndCompile) {
  for (const char* dt : {"f32", "bf16"}) {
    SCOPED_TRACE(dt);
    const std::string t = std::string(dt) + "[4,64,96]";
    auto m = parseModule("func @f {\n  %x = input() {name = \"x\"} : " + t + "\n  %r = input() {name = \"r\"} : " + t +
                         "\n  %key = input() {name = \"key\"} : i64[]\n  %d = dropout(%x, %key) {p = 0.1, stream = 2} : " + t +
                         "\n  %y = add(%d, %r) : " + t + "\n  return %y\n}\n");
    PassManager pm;
    pm.addPipeline("decompose," + defaultOptimizationPipeline());
    pm.run(*m);
    auto kernels = generateModule(*m);
    ASSERT_EQ(kernels.size(), 1u) << printModule(*m);
    const std::string& src = kernels[0].source;
    EXPECT_NE(src.find(uniformDeviceSource()), std::string::npos) << src;
    EXPECT_NE(src.find("fusec_uniform((t"), std::string::npos) << src;
    if (!nvrtcAvailable()) continue;
    auto cubins = compileCubins({{kernels[0].image, src}}, nullptr, 0, {}, nullptr);
    EXPECT_GT(cubins.at(0).size(), 0u);
  }
}

// The attention templates the models at ctx 256 do not reach: the bf16 backward on wgmma
// (from 1024 queries) at d 64 and 128, beside the forward (also the forward with a producer
// warpgroup, and the backward in one pass), and the same programs for a target without wgmma
// (mma.sync). Each path says so in its source, and NVRTC compiles it.
TEST(CodegenTest, WgmmaAttentionKernelsCompileWithNvrtc) {
  std::vector<CompileJob> jobs;
  struct Variant {
    bool wgmma, producer;
    int fusedDq;
    int64_t n = 1024, minSeq = 1024;  // the sequence; Target::wgmmaBackwardMinSeq
    int64_t fwdMinSeq = 0;            // Target::wgmmaForwardMinSeq
  };
  for (auto [wgmma, producer, fusedDq, n, minSeq, fwdMinSeq] :
       {Variant{true, false, 0}, Variant{true, true, 0}, Variant{true, false, 1}, Variant{true, false, 2},
        Variant{false, false, 0}, Variant{true, false, 0, 256}, Variant{true, false, 0, 256, 0},
        Variant{true, false, 1, 256, 0}, Variant{true, false, 2, 256, 256}, Variant{true, true, 0, 256, 1024, 512},
        Variant{true, true, 0, 1024, 1024, 512}})
    for (int64_t d : {64, 128}) {
      SCOPED_TRACE("d " + std::to_string(d) + ", N " + std::to_string(n) + (producer ? ", producer warpgroup" : "") +
                   (fusedDq ? ", one pass " + std::to_string(fusedDq) : "") +
                   ", backward on wgmma from N " + std::to_string(minSeq) + ", forward from " + std::to_string(fwdMinSeq));
      auto m = models::compileAttentionProgram("attention_backward", 2, n, d, AttentionLowering::Fused, DType::bf16);
      Target t;
      t.wgmma = wgmma;
      t.wgmmaProducer = producer;
      t.wgmmaProducerBackward = producer;
      t.wgmmaFusedDq = fusedDq;
      t.wgmmaBackwardMinSeq = minSeq;
      t.wgmmaForwardMinSeq = fwdMinSeq;
      auto kernels = generateModule(*m, t);
      int flash = 0;
      for (const auto& k : kernels) {
        if (k.family != KernelFamily::Attention) continue;
        ++flash;
        SCOPED_TRACE(k.image);
        const bool bwd = k.image.find("bwd") != std::string::npos;
        const bool hasWgmma = k.source.find("path: tensor cores (wgmma") != std::string::npos;
        // A backward or forward of a sequence shorter than the target's least runs on mma.sync.
        EXPECT_EQ(hasWgmma, wgmma && n >= (bwd ? minSeq : fwdMinSeq));
        if (!bwd && !hasWgmma) {
          EXPECT_NE(k.source.find("fa_forward(in"), std::string::npos);
        }
        if (hasWgmma) {
          const char* dkdv = producer ? "fa_backward_dkdv_wgmma_ws(" : fusedDq == 2 ? "fa_backward_dkdv_wgmma_dqw(" : "fa_backward_dkdv_wgmma(";
          EXPECT_NE(k.source.find(bwd ? dkdv : producer ? "fa_forward_wgmma_ws(" : "fa_forward_wgmma("), std::string::npos);
          // The producer's launch (the forward, dK/dV; or dK/dV with the dQ writer): one
          // warpgroup more than the consumers' two.
          EXPECT_EQ(k.launches.back().block[0], producer || (bwd && fusedDq == 2) ? 384u : 256u);
          if (!bwd) {  // 128-key tiles, one block an SM
            EXPECT_NE(k.source.find("#define FA_BC 128"), std::string::npos);
            EXPECT_NE(k.source.find("__launch_bounds__(" + std::to_string(k.launches.back().block[0]) + ", 1)"),
                      std::string::npos);
          }
          if (bwd) {
            EXPECT_EQ(k.launches.front().block[0], 256u);  // dQ
            // One pass: the dQ launch leaves the row statistics only, the dK/dV launch writes dq.
            EXPECT_EQ(k.source.find("dQ in the dK/dV pass") != std::string::npos, fusedDq > 0);
            EXPECT_EQ(k.source.find("fa_backward_dq_wgmma(in0, in1, in2, in3, in4, in5, nullptr)") != std::string::npos,
                      fusedDq > 0);
          }
        }
        jobs.push_back({k.image, k.source});
      }
      EXPECT_EQ(flash, 2) << "the forward and the backward";
      if (!nvrtcAvailable()) continue;
      auto cubins = compileCubins(jobs, nullptr, 0, NvrtcOptions{t.arch()}, nullptr);
      for (size_t i = 0; i < cubins.size(); ++i) EXPECT_GT(cubins[i].size(), 0u) << jobs[i].name;
      jobs.clear();
    }
}

// Short sequences' bf16 backward (up to Target::shortBackwardMaxSeq rows, d <= 64, one
// key/value head a query head) is one launch, a block per head, every row in shared memory
// (attention_mma.cuh fa_backward_short); past the length, at d 128, in f32, for grouped-query
// heads, with the wgmma backward asked for at every length, or with the switch at 0 it is the
// two passes. NVRTC compiles each one-launch variant (lengths of one tile, ragged, whole).
TEST(CodegenTest, ShortBackwardIsOneLaunch) {
  struct Case {
    int64_t n, d;
    DType dt;
    int64_t kvHeads;    // 0: as many as the query's (the attention program)
    int64_t maxSeq, wgmmaMinSeq;  // the target's
    bool oneLaunch;
    bool ds = true;  // the target's shortBackwardDs
  };
  const Case cases[] = {{256, 64, DType::bf16, 0, 256, 1024, true},  {1, 64, DType::bf16, 0, 256, 1024, true},
                        {17, 16, DType::bf16, 0, 256, 1024, true},   {100, 32, DType::bf16, 0, 256, 1024, true},
                        {200, 48, DType::bf16, 0, 256, 1024, true},  {257, 64, DType::bf16, 0, 256, 1024, false},
                        {256, 64, DType::bf16, 0, 0, 1024, false},   {256, 64, DType::bf16, 0, 128, 1024, false},
                        {128, 64, DType::bf16, 0, 128, 1024, true},  {256, 128, DType::bf16, 0, 256, 1024, false},
                        {256, 64, DType::f32, 0, 256, 1024, false},  {256, 64, DType::bf16, 2, 256, 1024, false},
                        {256, 64, DType::bf16, 0, 256, 0, false},    {256, 64, DType::bf16, 0, 4096, 1024, true},
                        {256, 64, DType::bf16, 0, 256, 1024, true, false}, {100, 32, DType::bf16, 0, 256, 1024, true, false}};
  std::vector<CompileJob> jobs;
  Target t;
  for (const Case& c : cases) {
    SCOPED_TRACE("N " + std::to_string(c.n) + ", d " + std::to_string(c.d) + ", " + std::string(dtypeName(c.dt)) +
                 (c.kvHeads ? ", " + std::to_string(c.kvHeads) + " kv heads" : "") + ", short up to " +
                 std::to_string(c.maxSeq) + ", wgmma from " + std::to_string(c.wgmmaMinSeq) +
                 (c.ds ? "" : ", dS not kept"));
    std::unique_ptr<Module> m;
    if (c.kvHeads) {
      const std::string n = std::to_string(c.n), d = std::to_string(c.d);
      m = parseModule("func @gqa {\n"
                    "  %q = input() {name = \"q\"} : bf16[2,4," + n + "," + d + "]\n"
                    "  %k = input() {name = \"k\"} : bf16[2,2," + n + "," + d + "]\n"
                    "  %v = input() {name = \"v\"} : bf16[2,2," + n + "," + d + "]\n"
                    "  %o = input() {name = \"o\"} : bf16[2,4," + n + "," + d + "]\n"
                    "  %do = input() {name = \"do\"} : bf16[2,4," + n + "," + d + "]\n"
                    "  %lse = input() {name = \"lse\"} : f32[2,4," + n + "]\n"
                    "  %dq, %dk, %dv = attention_backward(%q, %k, %v, %o, %do, %lse) {scale = 0.125, causal = true} : "
                    "bf16[2,4," + n + "," + d + "], bf16[2,2," + n + "," + d + "], bf16[2,2," + n + "," + d + "]\n"
                    "  return %dq, %dk, %dv\n}\n");
      PassManager pm;
      pm.addPipeline("decompose-keep-attention,fuse");
      pm.run(*m);
    } else {
      m = models::compileAttentionProgram("attention_backward", 2, c.n, c.d, AttentionLowering::Fused, c.dt);
    }
    t.shortBackwardMaxSeq = c.maxSeq;
    t.wgmmaBackwardMinSeq = c.wgmmaMinSeq;
    t.shortBackwardDs = c.ds;
    int backward = 0;
    for (const auto& k : generateModule(*m, t)) {
      if (k.family != KernelFamily::Attention || k.image.find("bwd") == std::string::npos) continue;
      ++backward;
      SCOPED_TRACE(k.image);
      const bool one = k.source.find("fa_backward_short(in") != std::string::npos;
      EXPECT_EQ(one, c.oneLaunch);
      EXPECT_EQ(k.launches.size(), c.oneLaunch ? 1u : 2u);
      if (!c.oneLaunch) continue;
      // A block a head holds q, dO, k and v whole and every row's statistics; the causal
      // attention program (self-attention, d = dv) also keeps dS^T (FA_SHORT_DS): 16-row key
      // strip w the queries from (w / 2) 32 to the rows, each row padded by 8 bf16.
      const int64_t rows = (c.n + 31) / 32 * 32;
      int64_t dsBytes = 0;
      for (int64_t w = 0; c.ds && w < rows / 16; ++w) dsBytes += 16 * (rows - w / 2 * 32 + 8) * 2;
      EXPECT_EQ(k.launches[0].grid, (std::array<uint32_t, 3>{2, 1, 1}));  // a block a head
      EXPECT_EQ(k.launches[0].block[0], uint32_t(2 * rows));             // a warp per 16 rows
      EXPECT_EQ(k.launches[0].dynamicSmem, uint32_t(4 * rows * (c.d + 8) * 2 + rows * 8 + dsBytes));
      EXPECT_NE(k.source.find(std::string("#define FA_SHORT_DS ") + (c.ds ? "1" : "0")), std::string::npos);
      jobs.push_back({k.image + "_n" + std::to_string(c.n) + "_d" + std::to_string(c.d) + (c.ds ? "_ds" : ""), k.source});
    }
    EXPECT_EQ(backward, 1);
  }
  ASSERT_EQ(jobs.size(), 9u);
  if (!nvrtcAvailable()) GTEST_SKIP() << "no NVRTC: the one-launch kernels were generated, not compiled";
  auto cubins = compileCubins(jobs, nullptr, 0, NvrtcOptions{t.arch()}, nullptr);
  for (size_t i = 0; i < cubins.size(); ++i) EXPECT_GT(cubins[i].size(), 0u) << jobs[i].name;
}

// Short sequences' bf16 forward at d <= 64 (one key/value head a query head), up to
// Target::shortForwardMaxSeq, is one launch of a block a head holding q, k and v whole (rows
// in whole 64-key tiles), a warp per 32 rows, two blocks an SM; longer, at d 128, in f32, with
// grouped heads, not causal, with the switch at 0 or with fewer heads than
// Target::shortForwardMinHeadsPerSm an SM it stays the wgmma (or mma) forward. NVRTC compiles each one-launch variant.
TEST(CodegenTest, ShortForwardIsOneLaunch) {
  struct Case {
    int64_t n, d;
    DType dt;
    int64_t kvHeads, maxSeq;
    bool oneLaunch;
    int minHeadsPerSm = 0;  // the target's (8 heads here)
    bool causal = true;
  };
  const Case cases[] = {{256, 64, DType::bf16, 0, 256, true},  {1, 64, DType::bf16, 0, 256, true},
                        {17, 16, DType::bf16, 0, 256, true},   {100, 32, DType::bf16, 0, 256, true},
                        {257, 64, DType::bf16, 0, 256, false}, {256, 64, DType::bf16, 0, 0, false},
                        {256, 128, DType::bf16, 0, 256, false}, {256, 64, DType::f32, 0, 256, false},
                        {256, 64, DType::bf16, 2, 256, false}, {128, 64, DType::bf16, 0, 128, true},
                        {256, 64, DType::bf16, 0, 256, false, 2}, {256, 64, DType::bf16, 0, 256, false, 0, false}};
  std::vector<CompileJob> jobs;
  Target t;
  for (const Case& c : cases) {
    SCOPED_TRACE("N " + std::to_string(c.n) + ", d " + std::to_string(c.d) + ", " + std::string(dtypeName(c.dt)) +
                 (c.kvHeads ? ", " + std::to_string(c.kvHeads) + " kv heads" : "") + ", short up to " +
                 std::to_string(c.maxSeq) + ", " + std::to_string(c.minHeadsPerSm) + " heads an SM at least" +
                 (c.causal ? "" : ", not causal"));
    const std::string n = std::to_string(c.n), d = std::to_string(c.d), dt(dtypeName(c.dt)),
                      kv = std::to_string(c.kvHeads ? c.kvHeads : 4);
    std::unique_ptr<Module> m = parseModule("func @fwd {\n"
                                            "  %q = input() {name = \"q\"} : " + dt + "[2,4," + n + "," + d + "]\n"
                                            "  %k = input() {name = \"k\"} : " + dt + "[2," + kv + "," + n + "," + d + "]\n"
                                            "  %v = input() {name = \"v\"} : " + dt + "[2," + kv + "," + n + "," + d + "]\n"
                                            "  %o, %lse = attention(%q, %k, %v) {scale = 0.125, causal = " +
                                            (c.causal ? "true" : "false") + "} : " + dt +
                                            "[2,4," + n + "," + d + "], f32[2,4," + n + "]\n"
                                            "  return %o, %lse\n}\n");
    PassManager pm;
    pm.addPipeline("decompose-keep-attention,fuse");
    pm.run(*m);
    t.shortForwardMaxSeq = c.maxSeq;
    t.shortForwardMinHeadsPerSm = c.minHeadsPerSm;
    int forward = 0;
    for (const auto& k : generateModule(*m, t)) {
      if (k.family != KernelFamily::Attention) continue;
      ++forward;
      const bool one = k.source.find("fa_forward_short(in") != std::string::npos;
      EXPECT_EQ(one, c.oneLaunch);
      if (!c.oneLaunch) continue;
      const int64_t rows = (c.n + 63) / 64 * 64;  // whole 64-key tiles
      ASSERT_EQ(k.launches.size(), 1u);
      EXPECT_EQ(k.launches[0].grid, (std::array<uint32_t, 3>{8, 1, 1}));  // a block a head
      EXPECT_EQ(k.launches[0].block[0], uint32_t(rows));                 // a warp per 32 rows
      EXPECT_EQ(k.launches[0].dynamicSmem, uint32_t(3 * rows * (c.d + 8) * 2));
      EXPECT_NE(k.source.find("__launch_bounds__(" + std::to_string(rows) + ", 2)"), std::string::npos);
      jobs.push_back({k.image + "_n" + n + "_d" + d, k.source});
    }
    EXPECT_EQ(forward, 1);
  }
  ASSERT_EQ(jobs.size(), 5u);
  if (!nvrtcAvailable()) GTEST_SKIP() << "no NVRTC: the one-launch kernels were generated, not compiled";
  auto cubins = compileCubins(jobs, nullptr, 0, NvrtcOptions{t.arch()}, nullptr);
  for (size_t i = 0; i < cubins.size(); ++i) EXPECT_GT(cubins[i].size(), 0u) << jobs[i].name;
}

TEST(CodegenTest, EveryModelKernelCompilesWithNvrtc) {
  SKIP_WITHOUT_NVRTC();
  std::map<std::string, std::string> unique;  // source without name -> one kernel name
  std::string report;
  int attentionKernels = 0;
  for (const std::string model : {"small", "medium", "large", "xl", "2.7B"})
    for (const std::string program : {"forward", "train_step", "train_step fused"})
      for (DType dt : {DType::f32, DType::bf16}) {
        const bool fused = program == "train_step fused";
        auto m = compiled(model, fused ? "train_step" : program, dt, 4, 256,
                          fused ? AttentionLowering::Fused : AttentionLowering::Naive);
        auto kernels = generateModule(*m);
        size_t before = unique.size();
        std::set<std::string> mine;
        for (const auto& k : kernels) {
          std::string s = withoutName(k);
          mine.insert(s);
          unique.emplace(s, k.image);
          attentionKernels += k.family == KernelFamily::Attention;
        }
        report += model + " " + program + " " + std::string(dtypeName(dt)) + ": " + std::to_string(kernels.size()) +
                  " kernels, " + std::to_string(mine.size()) + " unique, " + std::to_string(unique.size() - before) +
                  " new\n";
      }
  std::vector<CompileJob> jobs;
  for (auto& [src, name] : unique) jobs.push_back({name, src});
  CubinCache cache(CubinCache::defaultDir());
  CompileStats st;
  auto t0 = std::chrono::steady_clock::now();
  auto cubins = compileCubins(jobs, &cache, 0, {}, &st);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t i = 0; i < cubins.size(); ++i) EXPECT_GT(cubins[i].size(), 0u) << jobs[i].name;
  EXPECT_GT(attentionKernels, 0) << "the fused train steps have flash kernels";
  std::printf("%s%zu unique kernels: %d compiled, %d cached, %.2f s\n", report.c_str(), jobs.size(), st.compiled,
              st.cached, s);
}

}  // namespace
}  // namespace fusec

namespace fusec {
namespace {

// The codegen lit files hold the kernels the models do not make at their test shapes (column
// tiles of V > 1, a column tile's two reduction levels, RoPE pairs, picked elements, ...):
// every one of those is compiled too, after the passes its RUN line names.
TEST(CodegenTest, EveryLitCodegenKernelCompilesWithNvrtc) {
  SKIP_WITHOUT_NVRTC();
  std::vector<CompileJob> jobs;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(FUSEC_SOURCE_DIR) + "/tests/lit/codegen")) {
    if (entry.path().extension() != ".fir") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string src = text.str();
    std::string passes;
    if (size_t at = src.find("--passes="); at != std::string::npos) {
      at += 9;
      size_t end = at;
      while (end < src.size() && (std::isalnum(static_cast<unsigned char>(src[end])) || src[end] == ',' || src[end] == '-')) ++end;
      passes = src.substr(at, end - at);
    }
    std::unique_ptr<Module> m;
    try {
      m = parseModule(src, entry.path().string());
      PassManager pm;
      if (!passes.empty()) pm.addPipeline(passes);
      pm.run(*m);
    } catch (const Error&) {
      continue;  // a file of invalid IR (an error test)
    }
    ++files;
    // The default target, and each `env VAR=VALUE` a RUN line sets (a target switch:
    // FUSEC_ROW_SHARED=1, FUSEC_WGMMA=0, ...) on its own.
    std::vector<std::pair<std::string, std::string>> envs{{"", ""}};
    for (size_t at = src.find("env "); at != std::string::npos; at = src.find("env ", at + 4)) {
      const size_t eq = src.find('=', at), end = src.find_first_of(" \n", eq);
      if (eq == std::string::npos || end == std::string::npos || src.find(' ', at + 4) < eq) continue;
      envs.push_back({src.substr(at + 4, eq - at - 4), src.substr(eq + 1, end - eq - 1)});
    }
    for (const auto& [var, value] : envs) {
      std::optional<test::ScopedEnv> scoped;
      if (!var.empty()) scoped.emplace(var.c_str(), value.c_str());
      std::vector<GeneratedKernel> kernels;
      try {
        kernels = generateModule(*m, offlineTarget());
      } catch (const Error&) {
        continue;  // a file whose point is codegen's refusal
      }
      for (const auto& k : kernels)
        if (k.image == k.name)
          jobs.push_back({entry.path().stem().string() + (var.empty() ? "" : "_" + var + value) + "_" + k.name, k.source});
    }
  }
  ASSERT_GT(files, 10);
  ASSERT_GT(jobs.size(), 20u);
  CubinCache cache(CubinCache::defaultDir());
  auto cubins = compileCubins(jobs, &cache, 0, {});
  for (size_t i = 0; i < cubins.size(); ++i) EXPECT_GT(cubins[i].size(), 0u) << jobs[i].name;
}

}  // namespace
}  // namespace fusec
