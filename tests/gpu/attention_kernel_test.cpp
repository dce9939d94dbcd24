// The fused attention kernels (codegen/attention_kernel.cpp) on the GPU against the CPU
// interpreter's reference of the attention composites (double accumulation): the
// @attention and @attention_backward programs compiled with --attention=fused, fp32 and
// bf16, causal, d 16, 32, 64, 128, N 1, 17, 256, 1000 (and 4096 at d 64 and 128), batch 2:
// the tensor-core templates (bf16 at d 64 and 128 on wgmma, from 1024 queries for the backward,
// and on mma.sync with FUSEC_WGMMA=0; the other bf16, and f32 as 3xTF32, on mma.sync), also at
// d 80 (2.7B's heads); d 24 at N 17 and 256 runs the SIMT template (FFMA) in both dtypes.
// Tolerances, norm-wise relative: fp32 1e-4, bf16 2e-2 (the reference is the bf16 program:
// q, k, v rounded to bf16 as autocast does). Each program runs twice on different random
// inputs, so an element a kernel never writes shows the first run's value and fails the
// second comparison. Skips without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>

#include "frontend/models/attention.h"
#include "frontend/models/transformer.h"
#include "frontend/program_state.h"
#include "ir/roles.h"
#include "api/compile.h"
#include "passes/pipeline.h"
#include "ir/interpreter.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/pass.h"
#include "passes/pass_manager.h"
#include "runtime/device.h"
#include "runtime/executable.h"
#include "test_util.h"

namespace fusec {
namespace {

struct Shape3 {
  int64_t d, n;
};

class FusedAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!rt::deviceAvailable(&why)) GTEST_SKIP() << why;
  }
};

// Two rounds of random non-zero inputs (an unwritten element fails the second): `g` on the GPU
// against the interpreter's `ref`, every output within `tol`; `what` labels the printed errors.
void twoRoundsAgainstInterpreter(const Graph& g, const Graph& ref, uint32_t seed, double tol, const std::string& what) {
  rt::Executable exe(g);
  std::mt19937 rng(seed);
  for (int round = 0; round < 2; ++round) {
    Bindings env;
    for (Op* in : ref.inputs()) env[in->attrStr("name")] = test::randomNonZero(in->result()->type, rng);
    exe.bind(env);
    exe.run();
    const std::vector<HostTensor> want = interpret(ref, env);
    for (size_t i = 0; i < want.size(); ++i) {
      const double err = test::normRelError(exe.output(i), want[i]);
      std::printf("%s output %zu round %d: rel err %.2e\n", what.c_str(), i, round, err);
      EXPECT_LE(err, tol) << what << " output " << i << " round " << round;
    }
  }
}

void check(const std::string& program, DType dt, int64_t batch, int64_t n, int64_t d, uint32_t seed) {
  auto fused = models::compileAttentionProgram(program, batch, n, d, AttentionLowering::Fused, dt);
  const Graph& g = *fused->funcs.front();
  int attentionKernels = 0;
  for (const auto& op : g.ops) attentionKernels += op->kind == OpKind::Kernel && op->attrStr("name").find("attention_") == 0;
  // The backward program runs its forward (o, lse) too.
  ASSERT_EQ(attentionKernels, program == "attention" ? 1 : 2) << program;
  // The reference: the traced program through its program passes only (autocast for bf16,
  // autodiff for the backward), attention composites evaluated by the interpreter.
  Module ref;
  Graph& rg = models::buildAttentionProgram(ref, program, batch, n, d);
  api::lowerProgram(ref, program, {.dtype = dt, .attention = AttentionLowering::Fused, .passes = std::string()});
  rt::Executable exe(g);
  std::mt19937 rng(seed);
  for (int round = 0; round < (n >= 4096 ? 1 : 2); ++round) {
    Bindings env;
    for (Op* in : rg.inputs()) env[in->attrStr("name")] = test::randomNonZero(in->result()->type, rng);
    exe.bind(env);
    exe.run();
    std::vector<HostTensor> want = interpret(rg, env);
    const double tol = dt == DType::f32 ? 1e-4 : 2e-2;
    for (size_t i = 0; i < want.size(); ++i) {
      HostTensor got = exe.output(i);
      const double err = test::normRelError(got, want[i]);
      std::printf("%-18s %s d=%-3lld N=%-5lld output %zu round %d: rel err %.2e\n", program.c_str(),
                  std::string(dtypeName(dt)).c_str(), (long long)d, (long long)n, i, round, err);
      EXPECT_LE(err, tol) << program << " " << dtypeName(dt) << " d=" << d << " N=" << n << " output " << i;
    }
  }
}

// One run's settings of environment switches: (name, value) pairs.
using EnvSetting = std::vector<std::pair<const char*, const char*>>;
struct SettingRuns {
  std::vector<std::vector<HostTensor>> outs;  // each setting's outputs, in the order given
  std::vector<std::string> names;             // the compiled program's output names
};
// The bf16 fused attention `program` compiled and run under each setting in turn, on the same
// random inputs (from `seed`): for results that must agree across kernel forms.
SettingRuns runUnderSettings(const std::string& program, int64_t batch, int64_t n, int64_t d, uint32_t seed,
                             const std::vector<EnvSetting>& settings) {
  Module ref;
  Graph& rg = models::buildAttentionProgram(ref, program, batch, n, d);
  std::mt19937 rng(seed);
  Bindings env;
  for (Op* in : rg.inputs()) env[in->attrStr("name")] = test::randomNonZero(in->result()->type, rng);
  SettingRuns r;
  for (const EnvSetting& setting : settings) {
    std::vector<std::unique_ptr<test::ScopedEnv>> scoped;
    for (const auto& [name, value] : setting) scoped.push_back(std::make_unique<test::ScopedEnv>(name, value));
    auto m = models::compileAttentionProgram(program, batch, n, d, AttentionLowering::Fused, DType::bf16);
    const Graph& g = *m->funcs.front();
    rt::Executable exe(g);
    exe.bind(env);
    exe.run();
    r.outs.emplace_back();
    r.names.clear();
    for (size_t i = 0; i < g.outputs.size(); ++i) {
      r.outs.back().push_back(exe.output(i));
      r.names.push_back(g.outputs[i]->name);
    }
  }
  return r;
}

TEST_F(FusedAttention, MatchesTheInterpreter) {
  std::vector<Shape3> shapes;
  for (int64_t d : {16, 32, 64, 128})
    for (int64_t n : {1, 17, 256, 1000}) shapes.push_back({d, n});
  shapes.push_back({64, 4096});
  shapes.push_back({128, 4096});
  shapes.push_back({48, 256});  // 6 n blocks of 8: f32 partials of 3
  shapes.push_back({80, 256});  // 2.7B's head dim: 10 n blocks of 8
  shapes.push_back({24, 17});  // the SIMT template
  shapes.push_back({24, 256});
  uint32_t seed = 1;
  for (DType dt : {DType::f32, DType::bf16})
    for (const Shape3& s : shapes)
      for (const char* program : {"attention", "attention_backward"}) {
        const int64_t batch = s.n >= 4096 ? 1 : 2;
        check(program, dt, batch, s.n, s.d, seed++);
      }
}

// On a Hopper the bf16 kernels at d 64 and 128 run on wgmma (attention_wgmma.cuh); with
// FUSEC_WGMMA=0 the same shapes take the mma.sync template, which is what every other GPU
// runs: both stay tested.
TEST_F(FusedAttention, MmaSyncKernelsWhereWgmmaIsOff) {
  const char* old = std::getenv("FUSEC_WGMMA");
  const std::string saved = old ? old : "";
  setenv("FUSEC_WGMMA", "0", 1);
  uint32_t seed = 500;
  for (int64_t d : {64, 128})
    for (int64_t n : {17, 1000, 4096})
      for (const char* program : {"attention", "attention_backward"}) check(program, DType::bf16, n >= 4096 ? 1 : 2, n, d, seed++);
  if (old) setenv("FUSEC_WGMMA", saved.c_str(), 1);
  else unsetenv("FUSEC_WGMMA");
}

// The bf16 forward and dK/dV pass on wgmma with a producer warpgroup (attention_wgmma.cuh
// fa_forward_wgmma_ws, fa_backward_dkdv_wgmma_ws; FUSEC_WGMMA_PRODUCER and
// FUSEC_WGMMA_PRODUCER_BWD): against the interpreter, and bit for bit against the kernels
// without it, whose arithmetic they do in the same order (only who copies the tiles and how
// the warpgroups wait differ). Lengths that leave a partial last tile, one tile, and many (the
// ring wraps several times); the backward takes wgmma from 1024 queries.
TEST_F(FusedAttention, ProducerWarpgroupKernelsMatchBitForBit) {
  uint32_t seed = 700;
  for (const char* program : {"attention", "attention_backward"})
    for (int64_t d : {64, 128})
      for (int64_t n : {17, 200, 1000, 1100, 4096}) {
        const bool backward = std::string(program) == "attention_backward";
        if (backward && n < 1024) continue;
        const char* var = backward ? "FUSEC_WGMMA_PRODUCER_BWD" : "FUSEC_WGMMA_PRODUCER";
        test::ScopedEnv on(var, "1");
        check(program, DType::bf16, n >= 4096 ? 1 : 2, n, d, seed);
        // The same inputs through both kernels.
        Module ref;
        Graph& rg = models::buildAttentionProgram(ref, program, 2, n, d);
        std::mt19937 rng(seed++);
        Bindings env;
        for (Op* in : rg.inputs()) env[in->attrStr("name")] = test::randomNonZero(in->result()->type, rng);
        std::vector<std::vector<HostTensor>> outs;
        for (const char* producer : {"1", "0"}) {
          test::ScopedEnv choice(var, producer);
          auto fused = models::compileAttentionProgram(program, 2, n, d, AttentionLowering::Fused, DType::bf16);
          const Graph& g = *fused->funcs.front();  // every output: the backward's are dq, dk, dv
          rt::Executable exe(g);
          exe.bind(env);
          exe.run();
          outs.emplace_back();
          for (size_t i = 0; i < g.outputs.size(); ++i) outs.back().push_back(exe.output(i));
        }
        for (size_t i = 0; i < outs[0].size(); ++i)
          EXPECT_TRUE(outs[0][i].f == outs[1][i].f) << program << " d=" << d << " N=" << n << " output " << i;
      }
}

// Short sequences' bf16 forward in one launch (FUSEC_SHORT_FWD_MAX_SEQ, attention_mma.cuh
// fa_forward_short: a block a head, q, k and v whole, each warp two query strips): against the
// interpreter, and bit for bit the mma forward's results (its key tiles, products and softmax;
// the wgmma forward is moved past these lengths), the same on a second run. Lengths of one
// row, ragged tiles and the most it takes (256); d 16 to 64 (the causal attention program).
TEST_F(FusedAttention, ShortForwardEqualsTiled) {
  uint32_t seed = 3100;
  test::ScopedEnv mmaForward("FUSEC_WGMMA_FWD_MIN_SEQ", "100000"), anyHeads("FUSEC_SHORT_FWD_MIN_HEADS_PER_SM", "0");
  for (int64_t d : {16, 32, 64})
    for (int64_t n : {1, 17, 100, 256}) {
      {
        test::ScopedEnv on("FUSEC_SHORT_FWD_MAX_SEQ", "256");
        check("attention", DType::bf16, 2, n, d, seed);
      }
      // One launch twice, then the tiled mma forward.
      const EnvSetting one = {{"FUSEC_SHORT_FWD_MAX_SEQ", "256"}}, tiled = {{"FUSEC_SHORT_FWD_MAX_SEQ", "0"}};
      const std::vector<std::vector<HostTensor>> outs = runUnderSettings("attention", 3, n, d, seed++, {one, one, tiled}).outs;
      ASSERT_FALSE(outs[0].empty());
      for (size_t i = 0; i < outs[0].size(); ++i) {
        EXPECT_TRUE(outs[0][i].f == outs[1][i].f) << "two runs differ: output " << i << " d=" << d << " N=" << n;
        EXPECT_TRUE(outs[0][i].f == outs[2][i].f) << "one launch and the tiled forward differ: output " << i << " d=" << d
                                                  << " N=" << n << ", rel err " << test::normRelError(outs[0][i], outs[2][i]);
      }
    }
}

void groupedQueryHeads(uint32_t seed);  // below: the grouped-query cases against the interpreter
void onePassAgainstTwo(const char* mode);

// The bf16 causal backward on wgmma in one pass (FUSEC_WGMMA_FUSED_DQ=1 and 2, attention_wgmma.cuh
// addDq and dqWriter): the dK/dV blocks add each query tile's dQ in a fixed order, themselves or
// through a writer warpgroup. Against the interpreter (grouped-query cases too);
// dK and dV bit for bit against the two passes, whose arithmetic for them is
// the same; dQ within bf16's rounding of them (its sums group the keys differently); and dQ the
// same bit for bit on a second run of the same inputs (the order is fixed, not a race). Lengths
// with a partial last tile, one key block more than the query tiles' multiple, and many.
TEST_F(FusedAttention, OnePassBackwardMatchesTwoPasses) {
  for (const char* mode : {"1", "2"}) onePassAgainstTwo(mode);
  test::ScopedEnv on("FUSEC_WGMMA_FUSED_DQ", "1");
  groupedQueryHeads(1900);
  test::ScopedEnv writer("FUSEC_WGMMA_FUSED_DQ", "2");
  groupedQueryHeads(1950);
}

// One of the one-pass forms (FUSEC_WGMMA_FUSED_DQ=`mode`: 1, each warpgroup adds its half of
// dQ; 2, a writer warpgroup does) against the interpreter and the two passes.
void onePassAgainstTwo(const char* mode) {
  std::printf("FUSEC_WGMMA_FUSED_DQ=%s\n", mode);
  // The backward on wgmma at every length here, so that the short sequences (two key blocks,
  // one ragged) run these kernels too, not mma.sync's.
  test::ScopedEnv everyLength("FUSEC_WGMMA_BWD_MIN_SEQ", "0");
  uint32_t seed = 900;
  for (int64_t d : {64, 128})
    for (int64_t n : {256, 300, 1024, 1100, 1000 + 64 * 3, 4096}) {
      const int64_t batch = n >= 4096 ? 1 : 2;
      {
        test::ScopedEnv on("FUSEC_WGMMA_FUSED_DQ", mode);
        check("attention_backward", DType::bf16, batch, n, d, seed);
      }
      // One pass twice, then two passes.
      const EnvSetting one = {{"FUSEC_WGMMA_FUSED_DQ", mode}}, two = {{"FUSEC_WGMMA_FUSED_DQ", "0"}};
      const SettingRuns runs = runUnderSettings("attention_backward", batch, n, d, seed++, {one, one, two});
      const std::vector<std::vector<HostTensor>>& outs = runs.outs;
      const std::vector<std::string>& names = runs.names;
      ASSERT_EQ(names, (std::vector<std::string>{"dq", "dk", "dv"}));
      for (size_t i = 0; i < names.size(); ++i) {
        const std::string& name = names[i];
        EXPECT_TRUE(outs[0][i].f == outs[1][i].f) << "two runs differ: " << name << " d=" << d << " N=" << n;
        if (name == "dq") {
          const double err = test::normRelError(outs[0][i], outs[2][i]);
          std::printf("one-pass dq d=%-3lld N=%-5lld: rel err %.2e against two passes\n", (long long)d, (long long)n, err);
          EXPECT_LE(err, 1e-2) << "d=" << d << " N=" << n;
        } else {
          EXPECT_TRUE(outs[0][i].f == outs[2][i].f) << name << " d=" << d << " N=" << n;
        }
      }
    }
}

// Short sequences' bf16 backward in one launch (attention_mma.cuh fa_backward_short, up to
// Target::shortBackwardMaxSeq rows at d <= 64). By default (causal self-attention) it keeps dS^T
// in shared memory and pairs its warps (FA_SHORT_DS): against the interpreter (check), the
// same bits on a second run, and within bf16's rounding of the two passes
// (FUSEC_SHORT_BWD_MAX_SEQ=0), whose sums it splits at other places. Without it
// (FUSEC_SHORT_BWD_DS=0) it keeps the two passes' products, their order and the row
// statistics' sums: bit for bit the two passes. Lengths of one row, ragged tiles, and the most the launch takes
// (256 rows); d 16 to 64. (tests/unit/codegen_test.cpp ShortBackwardIsOneLaunch: which kernels
// these shapes get.)
TEST_F(FusedAttention, ShortBackwardEqualsTwoPasses) {
  uint32_t seed = 2100;
  for (int64_t d : {16, 32, 64})
    for (int64_t n : {1, 17, 100, 256}) {
      check("attention_backward", DType::bf16, 2, n, d, seed);
      // dS kept, twice; the two passes; one launch without dS kept.
      const EnvSetting dsKept = {{"FUSEC_SHORT_BWD_MAX_SEQ", "256"}, {"FUSEC_SHORT_BWD_DS", "1"}},
                       twoPasses = {{"FUSEC_SHORT_BWD_MAX_SEQ", "0"}},
                       dsNotKept = {{"FUSEC_SHORT_BWD_MAX_SEQ", "256"}, {"FUSEC_SHORT_BWD_DS", "0"}};
      const std::vector<std::vector<HostTensor>> outs =
          runUnderSettings("attention_backward", 3, n, d, seed++, {dsKept, dsKept, twoPasses, dsNotKept}).outs;
      ASSERT_EQ(outs[0].size(), 3u);  // dq, dk, dv
      auto norm = [](const HostTensor& t) {
        double s = 0;
        for (size_t k = 0; k < t.size(); ++k) s += double(t.get(k)) * t.get(k);
        return std::sqrt(s);
      };
      for (size_t i = 0; i < 3; ++i) {
        EXPECT_TRUE(outs[0][i].f == outs[1][i].f) << "two runs differ: output " << i << " d=" << d << " N=" << n;
        // Relative to dV's norm where it is larger: at one row dS is 0 up to rounding, so dQ and dK
        // are rounding noise in both.
        const double kept = test::normRelError(outs[0][i], outs[2][i]) *
                            std::min(1.0, norm(outs[2][i]) / std::max(norm(outs[2][2]), 1e-30));
        std::printf("d=%-3lld N=%-4lld output %zu: dS kept against the two passes, rel err %.2e\n", (long long)d,
                    (long long)n, i, kept);
        EXPECT_LT(kept, 4e-3) << "dS kept and the two passes differ: output " << i << " d=" << d << " N=" << n;
        EXPECT_TRUE(outs[3][i].f == outs[2][i].f) << "one launch and two passes differ: output " << i << " d=" << d
                                                  << " N=" << n << ", rel err " << test::normRelError(outs[3][i], outs[2][i]);
      }
    }
}

// Grouped-query attention (k, v with fewer heads than q): the forward reads kv head h / group,
// the dQ pass likewise, and the dK/dV pass sums the group's query heads in registers (one
// block per key tile of a kv head). Forward and backward, the tensor-core template in bf16
// and f32 and the SIMT one (d 24), several group sizes (MQA: one kv head), against the
// interpreter; twice each on different inputs (an unwritten element fails the second).
void groupedQueryHeads(uint32_t seed) {
  struct Case {
    const char* dtype;
    int64_t heads, kvHeads, n, d;
    bool causal;
  };
  // From 1024 queries the bf16 backward at d 64 and 128 runs on wgmma (attention_wgmma.cuh).
  const std::vector<Case> cases = {{"bf16", 4, 2, 100, 64, true},  {"bf16", 8, 1, 300, 64, true},
                                   {"bf16", 6, 2, 1, 128, true},   {"bf16", 4, 2, 77, 32, false},
                                   {"bf16", 4, 2, 1100, 64, true}, {"bf16", 4, 1, 1024, 128, false},
                                   {"f32", 4, 2, 130, 64, true},   {"f32", 6, 3, 40, 24, true},
                                   {"f32", 4, 1, 65, 24, false}};
  for (const Case& c : cases) {
    const std::string B = "2", H = std::to_string(c.heads), K = std::to_string(c.kvHeads), N = std::to_string(c.n),
                      D = std::to_string(c.d), t = c.dtype;
    auto ty = [&](const std::string& h) { return t + "[" + B + "," + h + "," + N + "," + D + "]"; };
    const std::string attrs = std::string("{causal = ") + (c.causal ? "true" : "false") + ", scale = 0.125}";
    const std::string text = "func @gqa {\n  %q = input() {name = \"q\"} : " + ty(H) + "\n  %k = input() {name = \"k\"} : " +
                             ty(K) + "\n  %v = input() {name = \"v\"} : " + ty(K) + "\n  %do = input() {name = \"do\"} : " +
                             ty(H) + "\n  %o, %lse = attention(%q, %k, %v) " + attrs + " : " + ty(H) + ", f32[" + B + "," + H +
                             "," + N + "]\n  %dq, %dk, %dv = attention_backward(%q, %k, %v, %o, %do, %lse) " + attrs + " : " +
                             ty(H) + ", " + ty(K) + ", " + ty(K) + "\n  return %o, %dq, %dk, %dv\n}\n";
    SCOPED_TRACE(text);
    std::unique_ptr<Module> ref = parseModule(text, "gqa.fir");
    std::unique_ptr<Module> m = cloneModule(*ref);
    api::lowerProgram(*m, "forward", {.attention = AttentionLowering::Fused, .programPasses = false});
    const Graph& g = *m->funcs.front();
    int attentionKernels = 0;
    for (const auto& op : g.ops) attentionKernels += op->kind == OpKind::Kernel && op->attrStr("family") == "attention";
    ASSERT_EQ(attentionKernels, 2);
    rt::Executable exe(g);
    std::mt19937 rng(seed++);
    for (int round = 0; round < 2; ++round) {
      Bindings env;
      for (Op* in : ref->funcs.front()->inputs()) env[in->attrStr("name")] = test::randomNonZero(in->result()->type, rng);
      exe.bind(env);
      exe.run();
      std::vector<HostTensor> want = interpret(*ref->funcs.front(), env);
      const double tol = t == "f32" ? 1e-4 : 2e-2;
      for (size_t i = 0; i < want.size(); ++i) {
        const double err = test::normRelError(exe.output(i), want[i]);
        std::printf("gqa %s %lld/%lld heads N=%-4lld d=%-3lld%s output %zu round %d: rel err %.2e\n", c.dtype,
                    (long long)c.heads, (long long)c.kvHeads, (long long)c.n, (long long)c.d, c.causal ? " causal" : "", i,
                    round, err);
        EXPECT_LE(err, tol) << "output " << i << " round " << round;
      }
    }
  }
}

TEST_F(FusedAttention, GroupedQueryHeadsMatchTheInterpreter) { groupedQueryHeads(70); }

// dK and dV without dQ (a program that needs no gradient of q): the tensor-core backward's
// dQ launch then computes only the row statistics its dK/dV launch reads
// (codegen/attention_mma.cuh), and must still run. Against the full program's dk and dv.
TEST_F(FusedAttention, DkDvWithoutDq) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const int64_t batch = 2, n = 200, d = 64;
    auto full = models::compileAttentionProgram("attention_backward", batch, n, d, AttentionLowering::Fused, dt);
    Module m;
    Graph& g = models::buildAttentionProgram(m, "attention_backward", batch, n, d);
    // The program passes (autodiff makes the VJP), then dq dropped, then the optimisation.
    api::lowerProgram(m, "attention_backward", {.dtype = dt, .attention = AttentionLowering::Fused, .passes = std::string()});
    ASSERT_EQ(g.outputs.size(), 3u);
    ASSERT_EQ(g.outputs[0]->name, "dq");
    g.outputs.erase(g.outputs.begin());
    api::lowerProgram(m, "attention_backward",
                      {.dtype = dt, .attention = AttentionLowering::Fused, .programPasses = false});
    rt::Executable a(*full->funcs.front()), b(*m.funcs.front());
    std::mt19937 rng(11);
    Bindings env;
    for (Op* in : full->funcs.front()->inputs()) env[in->attrStr("name")] = test::randomNonZero(in->result()->type, rng);
    a.bind(env);
    b.bind(env);
    a.run();
    b.run();
    for (size_t i = 0; i < 2; ++i) {
      const double err = test::normRelError(b.output(i), a.output(i + 1));
      std::printf("%s dk/dv without dq, output %zu: rel err %.2e against the full backward\n",
                  std::string(dtypeName(dt)).c_str(), i, err);
      EXPECT_EQ(err, 0.0) << dtypeName(dt) << " output " << i;  // the same kernels, the same order
    }
  }
}

// A model's loss and gradients (fwd_bwd) with fused attention against the same program with
// naive attention, both on the GPU: q, k, v are read through their views of the QKV GEMM's
// output and the RoPE kernel's (strided, several heads), o feeds the output projection.
std::vector<HostTensor> modelRun(const std::string& model, DType dt, AttentionLowering lowering, int64_t B, int64_t T,
                                 std::mt19937::result_type seed, int* attentionKernels) {
  Module m;
  models::buildTrainLoss(m, models::namedConfig(model), B, T);
  api::lowerProgram(m, "fwd_bwd", {.dtype = dt, .attention = lowering});
  const Graph& g = *m.funcs.front();
  *attentionKernels = 0;
  for (const auto& op : g.ops) *attentionKernels += op->kind == OpKind::Kernel && op->attrStr("name").find("attention_") == 0;
  // The same values for both lowerings: drawn in name order, the bf16 weight copies made
  // from them by bindProgramState.
  std::map<std::string, Type> sources;
  for (Op* in : g.inputs()) sources[in->attrStr("name")] = in->result()->type;
  for (Op* p : g.params())
    if (roleOf(*p) != Role::WeightCopy) sources[p->attrStr("name")] = p->result()->type;
  std::mt19937 rng(seed);
  Bindings env;
  const int64_t vocab = models::namedConfig(model).vocab;
  for (auto& [name, t] : sources)
    env[name] = !isFloat(t.dtype) ? test::randomIndex(t, rng, 0, vocab)
                : g.findInput(name)  ? test::randomNonZero(t, rng)
                                     : test::randomNonZero(t, rng, 0.05);
  bindProgramState(g, env);
  rt::Executable exe(g);
  exe.bind(env);
  exe.run();
  std::vector<HostTensor> out;
  for (size_t i = 0; i < g.outputs.size(); ++i) out.push_back(exe.output(i));
  return out;
}

TEST_F(FusedAttention, ModelGradientsMatchNaive) {
  for (const char* model : {"tiny", "small"})
    for (DType dt : {DType::f32, DType::bf16}) {
      int fusedKernels = 0, naiveKernels = 0;
      const int64_t T = std::min<int64_t>(64, models::namedConfig(model).ctx);
      auto fused = modelRun(model, dt, AttentionLowering::Fused, 2, T, 7, &fusedKernels);
      auto naive = modelRun(model, dt, AttentionLowering::Naive, 2, T, 7, &naiveKernels);
      EXPECT_EQ(naiveKernels, 0);
      EXPECT_EQ(fusedKernels, 2 * int(models::namedConfig(model).layers)) << model;
      ASSERT_EQ(fused.size(), naive.size());
      double worst = 0;
      for (size_t i = 0; i < fused.size(); ++i) worst = std::max(worst, test::normRelError(fused[i], naive[i]));
      std::printf("%s %s fwd_bwd: fused vs naive, worst rel err over loss and %zu gradients %.2e\n", model,
                  std::string(dtypeName(dt)).c_str(), fused.size() - 1, worst);
      EXPECT_LE(worst, dt == DType::f32 ? 1e-4 : 5e-2) << model;
    }
}

// The forward storing O merged for the output projection (passes/fusion/attention_output.h),
// the backward reading it back through the inverse permute: a projection and the gradients
// against the interpreter, f32, on the tensor-core template (d 16) and the SIMT one (d 24),
// whose permuted stores no model reaches. Two rounds of inputs, as above.
TEST_F(FusedAttention, MergedOutputFeedsTheProjection) {
  for (int64_t d : {16, 24}) {
    const std::string h = std::to_string(3 * d), t = "f32[2,3,40," + std::to_string(d) + "]";
    auto m = parseModule("func @merged {\n  %q = input() {name = \"q\"} : " + t + "\n  %k = input() {name = \"k\"} : " + t +
                         "\n  %v = input() {name = \"v\"} : " + t + "\n  %w = input() {name = \"w\"} : f32[" + h + "," + h +
                         "]\n  %do = input() {name = \"do\"} : " + t +
                         "\n  %o, %lse = attention(%q, %k, %v) {scale = 0.25} : " + t + ", f32[2,3,40]" +
                         "\n  %p = permute(%o) {perm = [0, 2, 1, 3]} : f32[2,40,3," + std::to_string(d) + "]" +
                         "\n  %x = reshape(%p) : f32[80," + h + "]\n  %y = matmul(%x, %w) : f32[80," + h + "]" +
                         "\n  %dq, %dk, %dv = attention_backward(%q, %k, %v, %o, %do, %lse) {scale = 0.25} : " + t + ", " + t +
                         ", " + t + "\n  return %y, %dq, %dk, %dv\n}\n");
    auto ref = cloneModule(*m);
    api::lowerProgram(*m, "", {.attention = AttentionLowering::Fused, .programPasses = false});
    const Graph& g = *m->funcs.front();
    int attention = 0, pointwise = 0;
    for (const auto& op : g.ops)
      if (op->kind == OpKind::Kernel) {
        attention += op->attrStr("name").find("attention_") == 0;
        pointwise += op->attrStr("name").find("pointwise_") == 0;
      }
    EXPECT_EQ(attention, 2) << printModule(*m);
    EXPECT_EQ(pointwise, 0) << "a copy kernel between the attention and its projection\n" << printModule(*m);
    twoRoundsAgainstInterpreter(g, *ref->funcs.front(), uint32_t(d), 1e-4, "merged output, d=" + std::to_string(d));
  }
}

// The backward's gradients stored straight into the gradient of a fused QKV projection
// (ir/attention_assembly.h): dq and dk rotated back by RoPE's tables in the stores, the heads
// merged and the three concatenated, one flash kernel and no kernel after it. Against the
// interpreter on each backward template a model reaches: the one-launch short backward (bf16
// N 256), the mma.sync passes (bf16 N 300, d 128; f32), wgmma (bf16 N 1100) and grouped-query
// attention. Two rounds of inputs (an unwritten element fails the second).
TEST_F(FusedAttention, GradientsStoredIntoTheProjectionsGradient) {
  struct Case {
    const char* dtype;
    int64_t heads, kvHeads, n, d;
  };
  const std::vector<Case> cases = {{"bf16", 4, 4, 256, 64}, {"bf16", 4, 4, 300, 64},  {"bf16", 4, 4, 130, 128},
                                   {"bf16", 4, 4, 1100, 64}, {"bf16", 4, 2, 300, 64}, {"f32", 4, 4, 130, 64}};
  for (const Case& c : cases) {
    const std::string t = c.dtype, N = std::to_string(c.n), D = std::to_string(c.d);
    auto ty = [&](const std::string& dt, int64_t h) { return dt + "[2," + std::to_string(h) + "," + N + "," + D + "]"; };
    auto merged = [&](int64_t h) { return t + "[2," + N + "," + std::to_string(h) + "," + D + "]"; };
    auto rows = [&](int64_t h) { return t + "[" + std::to_string(2 * c.n) + "," + std::to_string(h * c.d) + "]"; };
    const int64_t H = c.heads, K = c.kvHeads;
    std::string text = "func @qkv {\n  %q = input() {name = \"q\"} : " + ty(t, H) + "\n  %k = input() {name = \"k\"} : " +
                       ty(t, K) + "\n  %v = input() {name = \"v\"} : " + ty(t, K) + "\n  %do = input() {name = \"do\"} : " +
                       ty(t, H) + "\n  %pos = iota() {axis = 0} : i64[" + N + "]\n  %npos = neg(%pos) : i64[" + N + "]" +
                       "\n  %o, %lse = attention(%q, %k, %v) {scale = 0.125} : " + ty(t, H) + ", f32[2," + std::to_string(H) +
                       "," + N + "]\n  %dq, %dk, %dv = attention_backward(%q, %k, %v, %o, %do, %lse) {scale = 0.125} : " +
                       ty(t, H) + ", " + ty(t, K) + ", " + ty(t, K) + "\n";
    // dq and dk rotated back (in f32 between casts for bf16, as autocast has it), then merged.
    for (const char* g : {"dq", "dk"}) {
      const std::string x = g, h = x == "dq" ? std::to_string(H) : std::to_string(K);
      const int64_t heads = x == "dq" ? H : K;
      if (t == "bf16")
        text += "  %" + x + "f = cast(%" + x + ") : " + ty("f32", heads) + "\n  %" + x + "r = rope(%" + x + "f, %npos) " +
                "{theta = 10000} : " + ty("f32", heads) + "\n  %" + x + "b = cast(%" + x + "r) : " + ty(t, heads) + "\n";
      else
        text += "  %" + x + "b = rope(%" + x + ", %npos) {theta = 10000} : " + ty(t, heads) + "\n";
      text += "  %" + x + "m = permute(%" + x + "b) {perm = [0, 2, 1, 3]} : " + merged(heads) + "\n  %" + x +
              "2 = reshape(%" + x + "m) : " + rows(heads) + "\n";
    }
    text += "  %dvm = permute(%dv) {perm = [0, 2, 1, 3]} : " + merged(K) + "\n  %dv2 = reshape(%dvm) : " + rows(K) +
            "\n  %g = concat(%dq2, %dk2, %dv2) {axis = 1} : " + rows(H + 2 * K) + "\n  return %o, %g\n}\n";
    SCOPED_TRACE(text);
    std::unique_ptr<Module> ref = parseModule(text, "qkv.fir");
    std::unique_ptr<Module> m = cloneModule(*ref);
    createPass("decompose-keep-attention")->run(*m);  // rope, as a traced program's passes leave it
    api::lowerProgram(*m, "forward", {.attention = AttentionLowering::Fused, .programPasses = false});
    const Graph& g = *m->funcs.front();
    int assembled = 0;
    for (const auto& op : g.ops)
      if (op->kind == OpKind::Kernel && op->attrStr("family") == "attention")
        assembled += op->numResults() == 1 && op->result()->type.shape == ref->funcs.front()->outputs[1]->type.shape;
    ASSERT_EQ(assembled, 1) << printModule(*m);
    twoRoundsAgainstInterpreter(g, *ref->funcs.front(), uint32_t(c.n + c.d), t == "f32" ? 1e-4 : 2e-2,
                                "d(QKV) " + t + " " + std::to_string(H) + "/" + std::to_string(K) + " heads N=" + N + " d=" + D);
  }
}

}  // namespace
}  // namespace fusec
